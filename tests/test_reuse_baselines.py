"""reuse_baselines: baselines kept between checks, rerun whenever their key changes or cannot be trusted.

Each check runs a real training script (fixtures/fault_table_train.py) from
the test's own directory. The script appends its phase's name to `phases.log` in that directory on every
run (outside the cache), so a test counts which phases really ran.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from trainparity import check_resume
from trainparity._internal.cases.command_case import CommandCase
from trainparity._internal.cli.main import main
from trainparity._internal.processes.baseline_cache import cache_directory

# A tiny training script whose `--resume-without-*` resumes forget part of the state.
SCRIPT = Path(__file__).parent / "fixtures" / "fault_table_train.py"
FAULTS = {
    "clean": "--resume-from",
    "scheduler": "--resume-without-scheduler",
    "momentum": "--resume-without-momentum",
}
BASELINES = ("baseline_a", "baseline_b")
# What a report holds besides its comparison part: timings, process evidence, the cache's
# word, and which children started warm (a reused baseline did not start).
NOT_COMPARED = ("timing_seconds", "processes", "baselines_reused")


def _project(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy(SCRIPT, directory / "train.py")
    return directory


def _case(fault: str = "clean", total_step: int = 4, extra: tuple[str, ...] = ()) -> CommandCase:
    return CommandCase(
        template=[
            "python",
            "train.py",
            "--checkpoint",
            "{checkpoint}",
            "--end-step",
            "{end_step}",
            "--phase",
            "{phase}",
            *extra,
            FAULTS[fault],
            "{resume_from?}",
        ],
        checkpoint="{run_dir}/checkpoint.pt",
        split_step=2,
        total_step=total_step,
    )


def _ran(project: Path) -> list[str]:
    """Every phase that ran so far, and empties the log for the next check."""
    log = project / "phases.log"
    phases = sorted(log.read_text(encoding="utf-8").split()) if log.exists() else []
    log.unlink(missing_ok=True)
    return phases


def _compared(report: dict[str, Any]) -> str:
    """The comparison part of a report, as bytes are compared."""
    kept = {key: value for key, value in report.items() if key not in NOT_COMPARED}
    kept["environment"] = {
        key: value for key, value in report["environment"].items() if key != "child_start"
    }
    return json.dumps(kept, sort_keys=True)


def _check(project: Path, cache: Path, case: CommandCase | None = None, **options: Any):
    return check_resume(
        case or _case(),
        cwd=project,
        temporary_root=project.parent / "runs",
        reuse_baselines=cache,
        **options,
    )


def test_a_second_check_restores_its_baselines_and_reports_the_same_comparison(tmp_path):
    project, cache = _project(tmp_path / "project"), tmp_path / "cache"
    first = _check(project, cache)
    assert first.outcome == "PASS", first.message
    assert first.baselines_reused == {"baseline_a": "ran", "baseline_b": "ran"}
    assert _ran(project) == ["baseline_a", "baseline_b", "candidate_resume", "candidate_split"]

    second = _check(project, cache)
    assert second.outcome == "PASS", second.message
    assert second.baselines_reused == {"baseline_a": "reused", "baseline_b": "reused"}
    assert _ran(project) == ["candidate_resume", "candidate_split"]
    # The restored baselines were read as any others: recorded steps and the final state.
    assert second.trajectory is not None
    assert _compared(second.to_dict()) == _compared(first.to_dict())
    # Their process evidence is the one of the processes that produced them.
    baseline_pids = {p.phase: p.pid for p in first.processes if p.phase in BASELINES}
    assert {p.phase: p.pid for p in second.processes if p.phase in BASELINES} == baseline_pids
    assert not list((tmp_path / "runs").iterdir())  # restored into the run directory, removed


@pytest.mark.parametrize("change", ["script", "environment", "end step"])
def test_a_changed_key_runs_the_baselines_again(tmp_path, change):
    project, cache = _project(tmp_path / "project"), tmp_path / "cache"
    assert _check(project, cache).baselines_reused == {"baseline_a": "ran", "baseline_b": "ran"}
    _ran(project)
    options: dict[str, Any] = {}
    if change == "script":
        with open(project / "train.py", "a", encoding="utf-8") as script:
            script.write("# an edit the baselines may depend on\n")
    elif change == "environment":
        options["environment"] = {"TRAINING_NOTE": "another run"}
    else:
        options["case"] = _case(total_step=5)
    second = _check(project, cache, **options)
    assert second.outcome == "PASS", second.message
    assert second.baselines_reused == {"baseline_a": "ran", "baseline_b": "ran"}
    assert _ran(project) == ["baseline_a", "baseline_b", "candidate_resume", "candidate_split"]


@pytest.mark.parametrize(
    ("fault", "path"),
    [("scheduler", "scheduler._last_lr[0]"), ("momentum", 'optimizer.state["0"].momentum_buffer')],
)
def test_a_faulty_resume_fails_the_same_way_on_reused_baselines(tmp_path, fault, path):
    project, cache = _project(tmp_path / "project"), tmp_path / "cache"
    ran = _check(project, cache, _case(fault))
    assert ran.outcome == "FAIL" and ran.primary_difference.path == path, ran.message
    _ran(project)
    # The fault only touches the resume's argv: the baselines' key is the clean check's.
    reused = _check(project, cache, _case(fault))
    assert reused.baselines_reused == {"baseline_a": "reused", "baseline_b": "reused"}
    assert _ran(project) == ["candidate_resume", "candidate_split"]
    assert (reused.outcome, reused.message) == (ran.outcome, ran.message)
    assert _compared(reused.to_dict()) == _compared(ran.to_dict())


def test_a_damaged_entry_is_detected_and_run_again_not_trusted(tmp_path):
    project, cache = _project(tmp_path / "project"), tmp_path / "cache"
    assert _check(project, cache).outcome == "PASS"
    _ran(project)
    # One byte of baseline_a's stored checkpoint: a digest check, not its loader, must see it.
    manifests = [json.loads(path.read_text()) for path in cache.glob("*/manifest.json")]
    entry = next(
        path.parent
        for path, manifest in zip(cache.glob("*/manifest.json"), manifests, strict=True)
        if manifest["evidence"]["phase"] == "baseline_a"
    )
    checkpoint = entry / "files" / "run_dir" / "checkpoint.pt"
    data = bytearray(checkpoint.read_bytes())
    data[-20] ^= 0x01
    checkpoint.write_bytes(bytes(data))

    second = _check(project, cache)
    assert second.outcome == "PASS", second.message
    assert second.baselines_reused == {
        "baseline_a": "ran: the cached entry was not trusted: run_dir/checkpoint.pt does not "
        "match its digest",
        "baseline_b": "reused",
    }
    assert _ran(project) == ["baseline_a", "candidate_resume", "candidate_split"]
    # Run again, it is stored again: the next check trusts the fresh entry.
    assert _check(project, cache).baselines_reused == {
        "baseline_a": "reused",
        "baseline_b": "reused",
    }


def test_a_command_naming_a_file_outside_the_cwd_always_runs_its_baselines(tmp_path):
    project, cache = _project(tmp_path / "project"), tmp_path / "cache"
    outside = tmp_path / "scale.txt"
    outside.write_text("1.0\n", encoding="utf-8")
    # The key digests the files under the cwd; one named outside it could change unseen.
    result = _check(project, cache, _case(extra=("--notes", str(outside))))
    assert result.outcome == "PASS", result.message
    why = (
        f"ran: the command names {outside.resolve()}, outside the cwd {project.resolve()}: "
        "the key does not digest its files"
    )
    assert result.baselines_reused == {"baseline_a": why, "baseline_b": why}
    assert not list(cache.glob("*/manifest.json"))  # nothing stored under an untrusted key


def test_the_cli_reuses_the_reference_runs_of_check_runs(tmp_path, capsys):
    project, cache = _project(tmp_path / "project"), tmp_path / "cache"
    arguments = [
        "runs",
        "--json",
        "--no-progress",
        "--reuse-baselines",
        str(cache),
        "--cwd",
        str(project),
        "--total-step",
        "3",
        "--checkpoint",
        "{run_dir}/checkpoint.pt",
        "--variant",
        "unit=",
        "--variant",
        "half=--scale 0.5",
        "--",
        *_case().template[:-2],
    ]
    assert main(arguments) == 1
    first = json.loads(capsys.readouterr().out)
    assert first["baselines_reused"] == {"unit_a": "ran", "unit_b": "ran"}
    assert first["divergent_variant"] == "half"
    _ran(project)
    assert main(arguments) == 1
    second = json.loads(capsys.readouterr().out)
    assert second["baselines_reused"] == {"unit_a": "reused", "unit_b": "reused"}
    assert _ran(project) == ["half_a", "half_b"]
    assert _compared(second) == _compared(first)


def test_the_cache_directory_defaults_to_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_directory(True) == (tmp_path / "xdg" / "trainparity" / "baselines").resolve()
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_directory(True) == (tmp_path / "home" / ".cache/trainparity/baselines").resolve()
    assert cache_directory(False) is None
    with pytest.raises(TypeError, match="reuse_baselines must be False, True"):
        check_resume(_case(), reuse_baselines="")


def test_the_running_tests_name_is_not_part_of_the_key(tmp_path):
    """pytest names the running test in every child's environment: two tests of one suite
    that run the same phase share its baselines (a changed variable of the job's own does not)."""
    from trainparity._internal.processes.baseline_cache import BaselineCache

    cache = BaselineCache(
        tmp_path / "cache",
        run_root=tmp_path / "run",
        command_dir=tmp_path,
        case_spec="",
        start_mode="fresh",
        phases={"baseline_a": {"end_step": 4}},
    )
    argv = ["python", "train.py"]

    def key(**variables: str) -> str | None:
        return cache.key("baseline_a", argv, tmp_path, {"PATH": "/usr/bin", **variables})[0]

    one = key(PYTEST_CURRENT_TEST="tests/test_a.py::test_one (call)")
    assert one is not None
    assert key(PYTEST_CURRENT_TEST="tests/test_b.py::test_two (setup)") == one
    assert key() == one
    assert key(SEED="1") != one
