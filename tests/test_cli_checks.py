"""The check commands of `trainparity`: resume end to end; accumulation and coverage wiring."""

from __future__ import annotations

import json
import sys
import types
import uuid
from dataclasses import dataclass

import pytest
from trainparity._internal.accumulation.check import AccumulationExecutionPlan
from trainparity._internal.cli.main import main
from trainparity._internal.state.snapshot_file import read_snapshot
from trainparity.outcomes import Outcome


def _run(capsys, *arguments) -> tuple[int, str, str]:
    code = main([str(argument) for argument in arguments])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_resume_fail_exits_1_with_the_report_progress_and_no_secret(capsys, tmp_path, monkeypatch):
    secret = f"s3cr3t-{uuid.uuid4()}"
    monkeypatch.setenv("TRAINPARITY_TEST_TOKEN", secret)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # progress is shown on terminals
    work_dir, report = tmp_path / "work", tmp_path / "resume.json"
    code, printed, progress = _run(
        capsys,
        "resume",
        "trainparity.quickstarts.resume:FaultyCase",
        "--json",
        "--work-dir",
        work_dir,
        "--report",
        report,
        "--env",
        "CUBLAS_WORKSPACE_CONFIG=:4096:8",
    )
    assert code == 1
    assert printed == report.read_text(encoding="utf-8")
    payload = json.loads(printed)
    assert payload["outcome"] == "FAIL"
    assert payload["primary_difference"]["path"] == "scheduler.last_epoch"
    assert payload["propagated_environment_keys"] == ["CUBLAS_WORKSPACE_CONFIG"]
    assert payload["environment"]["variables"]["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert "trainparity: baseline_a started" in progress
    assert "trainparity: candidate_resume finished in" in progress

    snapshots = sorted((work_dir / "snapshots").glob("*.safetensors"))
    assert snapshots, "the observer writes one snapshot file per observed phase"
    for path in [report, *snapshots]:
        assert secret.encode() not in path.read_bytes()
    assert secret not in printed

    code, text, _ = _run(
        capsys, "diff", snapshots[0], work_dir / "snapshots" / "candidate_resume.safetensors"
    )
    assert code == 1
    assert "scheduler.last_epoch" in text


def test_resume_setup_error_is_a_usage_error_with_the_cause(capsys):
    code, text, error = _run(capsys, "resume", "no_such_module_anywhere:Case", "--no-progress")
    assert code == 4
    assert text == ""
    assert error.startswith(
        "trainparity resume: error: process case setup failed: cannot import case "
        "'no_such_module_anywhere:Case': No module named 'no_such_module_anywhere' (imported from "
    )


@dataclass(frozen=True)
class _Result:
    outcome: Outcome
    message: str

    def to_dict(self):
        return {"schema_version": 2, "outcome": str(self.outcome), "message": self.message}


def _fake_module(monkeypatch, name: str, **attributes) -> None:
    """Stand in for a check module with the contract's names (CONTRACT §7, §8)."""
    module = types.ModuleType(name)
    for key, value in attributes.items():
        setattr(module, key, value)
    monkeypatch.setitem(sys.modules, name, module)


def test_accumulation_clean_quickstart_passes_with_progress_kept_files_and_environment(
    capsys, tmp_path, monkeypatch
):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # progress is shown on terminals
    work_dir, report = tmp_path / "work", tmp_path / "accumulation.json"
    code, text, progress = _run(
        capsys,
        "accumulation",
        "trainparity.quickstarts.accumulation:Case",
        "--microbatches",
        "2",
        "--rtol",
        "1e-6",
        "--atol",
        "1e-7",
        "--sequential",
        "--work-dir",
        work_dir,
        "--report",
        report,
        "--env",
        "OMP_NUM_THREADS=1",
    )
    assert code == 0, text
    assert text.startswith("PASS: declared executions are equivalent")
    payload = json.loads(report.read_text(encoding="utf-8"))
    assert payload["outcome"] == "PASS"
    assert payload["environment"]["variables"]["OMP_NUM_THREADS"] == "1"
    # --sequential: each child finishes before the next starts.
    events = [
        " ".join(line.split()[1:3]) for line in progress.splitlines() if "trainparity:" in line
    ]
    assert events[:6] == [
        "baseline_a started",
        "baseline_a finished",
        "baseline_b started",
        "baseline_b finished",
        "candidate started",
        "candidate finished",
    ]
    for child in ("baseline_a", "baseline_b", "candidate"):
        observations = list((work_dir / child).glob("*.safetensors"))
        assert len(observations) == 1, f"--work-dir keeps {child}'s observation file"
        _, extras = read_snapshot(observations[0])
        assert extras["environment"]["variables"]["OMP_NUM_THREADS"] == "1"


def test_accumulation_maps_flags_onto_the_contract_plan(capsys, monkeypatch):
    calls: list = []
    starts: list = []

    def check_accumulation(
        case,
        *,
        candidate,
        comparison,
        device,
        seed,
        cwd,
        work_dir,
        report_path,
        environment,
        timeout,
        parallel,
        progress,
        start,
    ):
        calls.append(
            (case, candidate, comparison, device, seed, environment, timeout, parallel, progress)
        )
        starts.append(start)
        return _Result(Outcome.ABSTAIN, "baseline self-consistency failed")

    _fake_module(
        monkeypatch,
        "trainparity._internal.accumulation.check",
        AccumulationExecutionPlan=AccumulationExecutionPlan,
        check_accumulation=check_accumulation,
    )
    code, text, _ = _run(
        capsys,
        "accumulation",
        "cases:Accumulate",
        "--microbatches",
        "4",
        "--no-scale-accumulated-loss",
        "--optimizer-step-per-microbatch",
        "--clip-grad-norm",
        "1.5",
        "--clip-per-microbatch",
        "--omit-final-microbatch",
        "--rtol",
        "1e-6",
        "--atol",
        "1e-7",
        "--device",
        "cuda:1",
        "--seed",
        "5",
        "--env",
        "A=b",
    )
    assert code == 2
    assert text.startswith("ABSTAIN: baseline self-consistency failed")
    ((case, plan, comparison, device, seed, environment, timeout, parallel, progress),) = calls
    assert case == "cases:Accumulate"
    assert plan == AccumulationExecutionPlan(
        4,
        scale_accumulated_loss=False,
        optimizer_step_per_microbatch=True,
        clip_grad_norm=1.5,
        clip_per_microbatch=True,
        omit_final_microbatch=True,
    )
    assert (comparison.rtol, comparison.atol) == (1e-6, 1e-7)
    assert (device, seed, environment, timeout) == ("cuda:1", 5, {"A": "b"}, 300.0)
    assert progress is False  # stderr is not a terminal here
    assert starts == [None]  # no --start: the check's own default ($TRAINPARITY_START, else fresh)
    assert parallel is None  # the check's own default: concurrent on CPU
    assert (
        _run(capsys, "accumulation", "c:C", "--microbatches", "2", "--clip-per-microbatch")[0] == 4
    )
    assert _run(capsys, "accumulation", "c:C", "--microbatches", "0")[0] == 4


class _Policy:
    def __init__(self, *arguments):
        self.arguments = arguments


def test_coverage_maps_rank_files_policy_and_universe(capsys, monkeypatch, tmp_path):
    calls: list = []

    def audit_rank_arrays(rank_ids, *, policy, epoch, max_examples, evidence_path):
        calls.append((rank_ids, policy, epoch, max_examples, evidence_path))
        return _Result(Outcome.FAIL, "exactly_once policy was violated")

    policies = {
        name: type(name, (_Policy,), {})
        for name in ("ExactlyOnce", "AtLeastOnce", "NoCrossRankOverlap", "ExpectedPadding")
    }
    _fake_module(
        monkeypatch,
        "trainparity._internal.coverage.audit",
        audit_rank_arrays=audit_rank_arrays,
        **policies,
    )
    universe = tmp_path / "universe.txt"
    universe.write_text("3\n1\n\n2\n")
    code, text, _ = _run(
        capsys,
        "coverage",
        "--ids",
        "1=r1.npy",
        "--ids",
        "0=r0.bin",
        "--policy",
        "expected_padding",
        "--padding-count",
        "2",
        "--universe-file",
        universe,
        "--epoch",
        "3",
        "--evidence",
        tmp_path / "evidence.json",
    )
    assert code == 1 and text.startswith("FAIL: exactly_once policy was violated")
    ((rank_ids, policy, epoch, max_examples, evidence),) = calls
    assert {rank: str(path) for rank, path in rank_ids.items()} == {1: "r1.npy", 0: "r0.bin"}
    assert type(policy).__name__ == "ExpectedPadding" and policy.arguments == ([3, 1, 2], 2)
    assert (epoch, max_examples, evidence) == (3, 10, tmp_path / "evidence.json")

    _run(capsys, "coverage", "--ids", "0=a", "--policy", "exactly_once", "--universe", "5")
    assert calls[-1][1].arguments == (range(5),)
    _run(capsys, "coverage", "--ids", "0=a", "--policy", "at_least_once")
    assert calls[-1][1].arguments == (None,)
    for bad in (
        ("--ids", "0=a", "--ids", "0=b", "--policy", "exactly_once"),
        ("--ids", "x=a", "--policy", "exactly_once"),
        ("--ids", "0=a", "--policy", "expected_padding"),
        ("--ids", "0=a", "--policy", "exactly_once", "--padding-count", "1"),
        (
            "--ids",
            "0=a",
            "--policy",
            "exactly_once",
            "--universe",
            "3",
            "--universe-file",
            universe,
        ),
    ):
        assert _run(capsys, "coverage", *bad)[0] == 4
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"0\n\xff\xfe\n")
    code, _, err = _run(
        capsys, "coverage", "--ids", "0=a", "--policy", "exactly_once", "--universe-file", binary
    )
    assert (code, err) == (
        4,
        f"trainparity coverage: error: --universe-file {binary}: not UTF-8 text "
        "(byte 0xff at offset 2); give one integer per line\n",
    )


def test_resume_split_steps_runs_a_chain_of_resumes(capsys, tmp_path):
    report = tmp_path / "chain.json"
    code, _, _ = _run(
        capsys,
        "resume",
        "trainparity.quickstarts.resume:CleanCase",
        "--split-steps",
        "1,3",
        "--no-progress",
        "--report",
        report,
    )
    payload = json.loads(report.read_text(encoding="utf-8"))
    assert code == 0, payload["message"]
    assert [
        (link["phase"], link["from_step"], link["end_step"]) for link in payload["resume_chain"]
    ] == [
        ("candidate_split", 0, 1),
        ("candidate_resume_1", 1, 3),
        ("candidate_resume", 3, 4),
    ]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            ["--split-steps", "2,x"],
            "expected comma-separated positive integers such as 2,4, got '2,x'",
        ),
        (["--world-sizes", "2,0"], "must be positive integers, got '2,0'"),
        (["--split-steps", "3,1"], "--split-steps must be strictly increasing, got 3,1"),
        (["--split-steps", "1,1"], "--split-steps must be strictly increasing, got 1,1"),
        (
            ["--split-steps", "1,2", "--world-sizes", "2,1"],
            "--world-sizes needs one rank count per candidate phase: 3 for 2 split steps, got 2",
        ),
        # Checked against the case: its total step, and its own split when --split-steps is absent.
        (["--split-steps", "2,4"], "got split_steps [2, 4] and total_step 4"),
        (
            ["--world-sizes", "2,1,3"],
            "world_sizes needs one rank count >= 1 per candidate phase (2:",
        ),
    ],
)
def test_resume_chain_and_world_size_options_say_what_is_wrong(capsys, options, message):
    code, printed, error = _run(
        capsys, "resume", "trainparity.quickstarts.resume:CleanCase", *options, "--no-progress"
    )
    assert code == 4
    assert printed == ""
    assert message in error, error


def test_resume_world_sizes_with_a_command_template_is_refused(capsys):
    code, _, error = _run(
        capsys,
        "resume",
        "--split-step",
        "2",
        "--total-step",
        "4",
        "--checkpoint",
        "{run_dir}/ck.pt",
        "--world-sizes",
        "2,1",
        "--",
        "python",
        "train.py",
        "--end-step",
        "{end_step}",
    )
    assert code == 4
    assert "--world-sizes needs a CASE whose command() reads plan.world_size" in error


def test_resume_plan_only_writes_the_chain_for_judge(capsys, tmp_path):
    plan = tmp_path / "plan"
    code, _, _ = _run(
        capsys,
        "resume",
        "trainparity.quickstarts.resume:CleanCase",
        "--split-steps",
        "1,3",
        "--plan-only",
        plan,
    )
    assert code == 0
    written = json.loads((plan / "plan.json").read_text(encoding="utf-8"))
    assert written["split_steps"] == [1, 3]  # what `trainparity judge` hands check_resume again
    assert "world_sizes" not in written
    phases = {phase["name"]: (phase["end_step"], phase["after"]) for phase in written["phases"]}
    assert phases == {
        "baseline_a": (4, []),
        "baseline_b": (4, []),
        "candidate_split": (1, []),
        "candidate_resume_1": (3, ["candidate_split"]),
        "candidate_resume": (4, ["candidate_resume_1"]),
    }
