"""NoiseComparison through real checks on real nondeterministic CPU training.

tests/fixtures/noisy_training.py sums its per-sample gradients in an order
drawn from os.urandom, as GPU atomics do: two runs of one seed part at the
last bit from step 1. Every check here runs real processes; the larger
false-positive and detection tables are benchmarks/validate_noise.py's
(docs/validation.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import trainparity
from trainparity import ExactComparison, NoiseComparison, Outcome
from trainparity._internal.cli.main import main
from trainparity.api import AccumulationExecutionPlan

from tests.fixtures import noisy_training

REPO_ROOT = Path(__file__).resolve().parents[1]
CASES = "tests.fixtures.noisy_training"
SPLIT = noisy_training.NoisyCase.split_step
WARM = {"start": "warm"}


def resume(case: str, tmp_path: Path, comparison=None, **options):
    return trainparity.check_resume(
        f"{CASES}:{case}",
        cwd=REPO_ROOT,
        temporary_root=tmp_path,
        comparison=comparison if comparison is not None else NoiseComparison(),
        **WARM,
        **options,
    )


# --- check_resume ---------------------------------------------------------------------


def test_the_runs_really_differ_and_the_exact_comparison_abstains(tmp_path):
    result = resume("NoisyCase", tmp_path, ExactComparison())
    assert result.outcome is Outcome.ABSTAIN, result.message
    assert result.first_divergent_step == 1


@pytest.mark.parametrize("repeat", range(3))
def test_a_clean_resume_stays_inside_the_envelope(tmp_path, repeat):
    result = resume("NoisyCase", tmp_path)
    assert result.outcome is Outcome.PASS, result.message
    envelope = result.noise_envelope
    assert envelope["judged_on"] == "recorded steps"
    assert envelope["samples"][:3] == ["baseline_a", "baseline_b", "baseline_c"]
    # The noise is real: the baselines differ at the judged steps.
    judged = [row for row in envelope["steps"] if row["candidate"] == "candidate_resume"]
    assert judged and all(row["noise"].get("model", 0) > 0 for row in judged)
    closest = envelope["closest_approach"]
    assert 0 < closest["ratio"] <= 8
    assert f"closest approach: {closest['ratio']:.3g}×" in result.message
    assert envelope["sensitivity"].startswith(
        "a fault that changes a tensor of model.* by more than"
    )
    assert f"at step {SPLIT}" in envelope["sensitivity"]
    report = json.loads(json.dumps(result.to_dict()))
    assert report["noise_envelope"]["factor"] == 8.0
    assert [process.phase for process in result.processes][:4] == [
        "baseline_a",
        "baseline_b",
        "baseline_c",
        "candidate_split",
    ]


def test_without_record_the_final_states_are_judged(tmp_path):
    result = resume("UnrecordedNoisyCase", tmp_path)
    assert result.outcome is Outcome.PASS, result.message
    assert result.noise_envelope["judged_on"] == "final states"
    assert "at the final state" in result.message


# Each fault: (the step it first shows at, the component that shows it).
DETECTED = {
    "missing_model": (SPLIT, "model"),
    "missing_optimizer": (SPLIT, "optimizer"),
    "moments_not_restored": (SPLIT, "optimizer"),
    "missing_scheduler": (SPLIT, "scheduler"),
    "missing_python_rng": (SPLIT, "rng"),
    "missing_numpy_rng": (SPLIT, "rng"),
    "missing_torch_rng": (SPLIT, "rng"),  # dropout's generator
    "missing_hidden": (SPLIT, "extra"),
    "cursor_off_by_one_batch": (SPLIT, "data"),
    "step_off_by_one": (SPLIT, "$"),  # the claimed step of the record after loading
    "optimizer_group_mismatch": (SPLIT, "optimizer"),
    "extra_scheduler_step": (SPLIT, "scheduler"),
    "lr_one_percent": (SPLIT, "optimizer"),
}


@pytest.mark.parametrize("fault", list(DETECTED))
def test_every_fault_of_the_table_fails_at_its_step_and_component(tmp_path, fault):
    result = resume(noisy_training.FAULT_CASES[fault], tmp_path)
    step, component = DETECTED[fault]
    assert result.outcome is Outcome.FAIL, result.message
    assert result.first_divergent_step == step, result.message
    path = result.primary_difference.path
    assert path.split(".")[0].split("[")[0] == component or (component == "$" and path == "step")


def test_with_records_the_saved_checkpoint_is_judged_too(tmp_path):
    """Every record is right, the final save is stale: the exact check sees it, and so must this."""
    result = resume(noisy_training.FAULT_CASES["stale_save"], tmp_path)
    assert result.outcome is Outcome.FAIL, result.message
    assert result.primary_difference.path == "step"
    assert result.first_divergent_step == noisy_training.NoisyCase.total_step
    assert "final_state" in result.noise_envelope


def test_a_lossy_restore_leaves_the_envelope_by_a_named_ratio(tmp_path):
    result = resume(noisy_training.LOSSY_CASES[1e-4], tmp_path)
    assert result.outcome is Outcome.FAIL, result.message
    assert result.first_divergent_step == SPLIT
    assert result.primary_difference.reason == "noise_envelope"
    assert "left the noise envelope" in result.message and "× the noise" in result.message


def test_candidate_split_parting_before_its_save_abstains_never_fails(tmp_path):
    """The baselines agree bit for bit; candidate_split alone sums in another order."""
    result = resume(
        "NoisyCase",
        tmp_path,
        ExactComparison(),
        environment={"NOISY_ORDER": "split_reversed"},
    )
    assert result.outcome is Outcome.ABSTAIN, result.message
    assert result.first_divergent_step == 1
    assert "candidate_split differs from baseline_a at step 1" in result.message
    assert "not deterministic" in result.message


def test_under_noise_candidate_split_before_its_save_is_one_more_sample(tmp_path):
    """The same runs under NoiseComparison: what candidate_split's order moves is noise."""
    result = resume("NoisyCase", tmp_path, environment={"NOISY_ORDER": "split_reversed"})
    assert result.outcome is Outcome.PASS, result.message
    before_split = [row for row in result.noise_envelope["steps"] if row["step"] < SPLIT]
    assert any(row["noise"].get("model", 0) > 0 for row in before_split)


def test_max_noise_abstains_and_says_what_cannot_be_seen(tmp_path):
    result = resume("NoisyCase", tmp_path, NoiseComparison(max_noise=1e-12))
    assert result.outcome is Outcome.ABSTAIN, result.message
    assert "above max_noise=1e-12" in result.message
    assert "cannot be seen" in result.message


# The exact fault table (ANCHOR_CASES §1.3) on its deterministic trainer: NoiseComparison
# gives the exact comparison's verdicts and paths (no step there has any noise).
DETERMINISTIC = (
    "DeterministicCase",
    "RecordedDeterministicCase",
    "MissingModelCase",
    "RecordedMissingOptimizerCase",
    "MissingSchedulerCase",
    "RecordedMissingTorchCpuRngCase",
    "CursorOffsetCase",
    "RecordedStepOffByOneCase",
    "ExtraSchedulerStepCase",
    "MissingHiddenGlobalCase",
)


@pytest.mark.parametrize("case", DETERMINISTIC)
def test_on_a_deterministic_job_noise_gives_the_exact_verdicts(tmp_path, case):
    spec = f"tests.fixtures.resume_faults:{case}"
    verdicts = []
    for index, comparison in enumerate((ExactComparison(), NoiseComparison(baselines=2))):
        result = trainparity.check_resume(
            spec,
            cwd=REPO_ROOT,
            temporary_root=tmp_path / str(index),
            comparison=comparison,
            environment={"TRAINPARITY_DEVICE": "cpu"},
            **WARM,
        )
        verdicts.append(
            (
                result.outcome,
                result.first_divergent_step,
                [(d.path, d.reason) for d in result.all_differences],
            )
        )
    assert verdicts[0] == verdicts[1]


# --- check_runs ------------------------------------------------------------------------


def test_check_runs_judges_every_variant_against_the_noise_pair(tmp_path):
    result = trainparity.check_runs(
        f"{CASES}:NoisyRuns",
        comparison=NoiseComparison(),
        noise=("ref", "ref_repeat"),
        cwd=REPO_ROOT,
        temporary_root=tmp_path,
        **WARM,
    )
    assert result.outcome is Outcome.FAIL, result.message
    assert result.divergent_variant == "lr_up"
    outcomes = {c.variant: c.outcome for c in result.variant_comparisons}
    assert outcomes == {"same": Outcome.PASS, "lr_up": Outcome.FAIL}
    assert result.noise_envelope["noise_pair"] == ["ref", "ref_repeat"]


def test_check_runs_passes_a_variant_that_differs_only_by_rounding(tmp_path):
    result = trainparity.check_runs(
        f"{CASES}:NoisyRuns",
        {"ref": {}, "ref_repeat": {}, "same": {}},
        comparison=NoiseComparison(),
        noise=("ref", "ref_repeat"),
        cwd=REPO_ROOT,
        temporary_root=tmp_path,
        **WARM,
    )
    assert result.outcome is Outcome.PASS, result.message
    assert "inside the noise of ref and ref_repeat" in result.message


@pytest.mark.parametrize(
    ("comparison", "noise", "complaint"),
    [
        (ExactComparison(), ("ref", "same"), "give comparison=NoiseComparison"),
        (NoiseComparison(), ("ref", "nope"), "'nope', which is not a variant"),
        (NoiseComparison(), "ref", "a pair of variant names"),
    ],
)
def test_check_runs_noise_usage_errors(tmp_path, comparison, noise, complaint):
    result = trainparity.check_runs(
        f"{CASES}:NoisyRuns",
        {"ref": {}, "same": {}},
        comparison=comparison,
        noise=noise,
        cwd=REPO_ROOT,
        temporary_root=tmp_path,
    )
    assert result.outcome is Outcome.ERROR
    assert complaint in result.message
    assert result.usage_error == "noise"


# --- check_accumulation ----------------------------------------------------------------


def test_check_accumulation_judges_the_phases_against_repeated_baselines(tmp_path):
    exact = trainparity.check_accumulation(
        f"{CASES}:NoisyAccumulationCase",
        candidate=AccumulationExecutionPlan(4),
        comparison=ExactComparison(),
        cwd=REPO_ROOT,
        temporary_root=tmp_path / "exact",
    )
    assert exact.outcome is Outcome.ABSTAIN, exact.message
    noise = trainparity.check_accumulation(
        f"{CASES}:NoisyAccumulationCase",
        candidate=AccumulationExecutionPlan(4),
        comparison=NoiseComparison(),
        cwd=REPO_ROOT,
        temporary_root=tmp_path / "noise",
    )
    assert noise.outcome is Outcome.PASS, noise.message
    assert len(noise.process_ids) == 5  # three baselines, the split reference, the candidate
    assert [row["phase"] for row in noise.noise_envelope["steps"]][:2] == [
        "loss_accounting",
        "gradient",
    ]


def test_check_accumulation_still_fails_a_wrong_loss_normalisation(tmp_path):
    result = trainparity.check_accumulation(
        f"{CASES}:NoisyScaledAccumulationCase",
        candidate=AccumulationExecutionPlan(4),
        comparison=NoiseComparison(),
        cwd=REPO_ROOT,
        temporary_root=tmp_path,
    )
    assert result.outcome is Outcome.FAIL, result.message
    assert result.first_observed_phase == "loss_accounting"


# --- the command line -------------------------------------------------------------------
# The commands run in this process through the command line's main(), which is what
# `python -m trainparity` runs and exits with (cli/main.py run_as_program; a real process's
# exit codes and streams are tests/test_cli.py's): the same parser, checks and exit codes,
# without importing trainparity (and torch) again in a new interpreter per command.


def cli(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of `trainparity ARGUMENTS`."""
    capsys.readouterr()  # what the test printed before is not the command's
    code = main(list(arguments))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        (["resume", f"{CASES}:NoisyCase", "--noise-factor", "0"], "--noise-factor"),
        (
            ["resume", f"{CASES}:NoisyCase", "--noise-factor", "4", "--baselines", "1"],
            "--baselines",
        ),
        (["resume", f"{CASES}:NoisyCase", "--baselines", "1"], "--baselines"),
        (["accumulation", f"{CASES}:NoisyAccumulationCase", "--max-noise", "0"], "--max-noise"),
        (["runs", f"{CASES}:NoisyRuns", "--noise", "ref", "same", "--rtol", "0"], "--noise-factor"),
        (["diff", "a", "b", "--noise-factor", "8"], "--noise"),
        (
            ["resume", f"{CASES}:NoisyCase", "--noise-factor", "8", "--rtol", "0", "--atol", "0"],
            "--noise-factor",
        ),
    ],
)
def test_noise_usage_errors_exit_4_and_name_the_option(capsys, monkeypatch, arguments, named):
    monkeypatch.chdir(REPO_ROOT)  # where the case modules import from, as the commands ran
    code, _, err = cli(capsys, *arguments)
    assert code == 4, err
    assert named in err


# Five recordings of the noisy script, each by a training process of its own. The processes
# are forked from one that imported torch and torch._dynamo (which each run's AdamW imports)
# and ran no torch op: each runs the module as `python -m` would, in its own environment, as
# a warm check starts its phases. Those imports and the interpreter's teardown, not the 6
# steps, were nearly all of a fresh run's CPU (20 s for the five, now 4 s).
_RECORD_RUNS = """
import atexit, json, os, runpy, sys
import torch, torch._dynamo
runs = json.loads(sys.argv[1])
children = []
for argv, variables in runs:
    pid = os.fork()
    if pid == 0:
        os.environ.update(variables)
        sys.argv = argv
        try:
            runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
        else:
            code = 0
        # As a warm child ends: exit handlers (the recorder's) run, streams flushed, and not
        # the teardown of torch's modules, which copies the parent's pages (1 s of CPU each).
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    children.append(pid)
sys.exit(max(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0 for pid in children))
"""


def test_diff_judges_two_recordings_against_a_noise_pair(tmp_path, capsys):
    # Each run's summation order is drawn from a fixed seed, so the verdicts do not depend on
    # the draw: this test checks how `diff --noise` judges and words them. How often a clean
    # pair leaves the envelope by chance is the envelope's own false-FAIL rate
    # (benchmarks/validate_noise.py), not something one draw can show.
    recordings = {}
    runs = []
    for seed, (name, scale) in enumerate(
        (("a", "1"), ("b", "1"), ("noise_a", "1"), ("noise_b", "1"), ("lr", "1.001")), start=1
    ):
        recordings[name] = tmp_path / f"rec_{name}"
        argv = [CASES, "--run-dir", str(tmp_path / name), "--end-step", "6", "--record"]
        variables = {
            "TRAINPARITY_RECORD": str(recordings[name]),
            "NOISY_LR_SCALE": scale,
            "NOISY_ORDER_SEED": str(seed),
            "OMP_NUM_THREADS": "1",
        }
        runs.append((argv, variables))
    completed = subprocess.run(
        [sys.executable, "-c", _RECORD_RUNS, json.dumps(runs)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr
    # Naming the noise pair asks for the envelope: NoiseComparison()'s factor 8 applies.
    noise = ["--noise", str(recordings["noise_a"]), str(recordings["noise_b"])]
    code, out, err = cli(capsys, "diff", str(recordings["a"]), str(recordings["b"]), *noise)
    assert code == 0, out + err
    assert "stays inside the noise" in out and "sensitivity:" in out
    code, out, err = cli(
        capsys, "diff", str(recordings["a"]), str(recordings["lr"]), *noise, "--json"
    )
    assert code == 1, out + err
    report = json.loads(out)
    assert report["outcome"] == "FAIL"
    assert report["noise_envelope"]["first_exit_step"] == 0
