"""A newcomer's bad inputs (issue 26): each keeps its cause and says what to do, with the right exit code.

User-input mistakes (case path, case shape, step numbers) come back from the
Python API as ERROR results naming the field and from the command line as
usage errors (exit 4); a training child that fails is ERROR (exit 3) with its
stderr's last lines, whether or not the run directory is kept.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from trainparity._internal.cases.loading import CaseImportError, CaseSetupError, CaseSetupTypeError
from trainparity._internal.cli.main import main
from trainparity._internal.processes.failure_text import TAIL_LINES, directory_listing, log_tail
from trainparity._internal.resume.check import check_resume
from trainparity._internal.runs.check import check_runs
from trainparity.outcomes import Outcome

REPO_ROOT = Path(__file__).resolve().parents[1]
CASES = "tests.fixtures.newcomer_cases"


def _cli(capsys, *arguments) -> tuple[int, str, str]:
    code = main(["resume", *map(str, arguments), "--cwd", str(REPO_ROOT), "--no-progress"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    ("case", "field", "cause"),
    [
        (
            "parity_cas:ResumeCase",
            "case",
            "cannot import case 'parity_cas:ResumeCase': No module named 'parity_cas' "
            f"(imported from {REPO_ROOT}; is the module in that directory?)",
        ),
        (
            "parity_case.ResumeCase",
            "case",
            "case must use the form 'package.module:ClassName'",
        ),
        (
            f"{CASES}:NoCheckpointPathCase",
            "case",
            f"case '{CASES}:NoCheckpointPathCase' does not implement ProcessResumeCase: "
            "it has no checkpoint_path(run_dir)",
        ),
        (
            f"{CASES}:StepsReversedCase",
            "split_step",
            "need 0 < split_step < total_step, got 12 and 5",
        ),
    ],
    ids=["module-typo", "no-colon", "no-checkpoint-path", "steps-reversed"],
)
def test_bad_input_is_a_usage_error_that_keeps_its_cause(capsys, tmp_path, case, field, cause):
    code, printed, error = _cli(capsys, case)
    assert code == 4
    assert printed == ""
    assert error == f"trainparity resume: error: process case setup failed: {cause}\n"

    result = check_resume(case, cwd=REPO_ROOT, temporary_root=tmp_path)
    assert result.outcome is Outcome.ERROR  # CONTRACT §6.2: a setup error is a result
    assert result.usage_error == field
    assert result.message.startswith("process case setup failed: ")
    assert "usage_error" not in result.to_dict()  # the exit code carries it, not a report key
    assert list(tmp_path.iterdir()) == []  # nothing ran


def test_setup_errors_are_value_and_type_errors_naming_the_field():
    assert issubclass(CaseImportError, CaseSetupError)
    assert issubclass(CaseSetupError, ValueError)
    assert issubclass(CaseSetupTypeError, TypeError)
    assert CaseImportError("x").field == "case"


def test_a_string_step_is_a_type_error_naming_the_field(tmp_path, monkeypatch):
    from tests.fixtures import newcomer_cases

    monkeypatch.setattr(newcomer_cases.StepsReversedCase, "split_step", "2")
    result = check_resume(f"{CASES}:StepsReversedCase", cwd=REPO_ROOT, temporary_root=tmp_path)
    assert result.usage_error == "split_step"
    assert result.message == "process case setup failed: split_step must be an int, got '2'"


def test_check_runs_shares_the_setup_messages(tmp_path):
    result = check_runs(f"{CASES}:WrongCheckpointNameCase", cwd=REPO_ROOT, temporary_root=tmp_path)
    assert result.usage_error == "variants"
    assert result.message == (
        "runs case setup failed: give variants=... or declare a `variants` mapping on the case"
    )


def test_a_crashing_script_shows_its_traceback_without_a_work_dir(capsys, tmp_path):
    code, printed, _ = _cli(capsys, f"{CASES}:CrashingCase")
    assert code == 3
    lines = printed.splitlines()
    assert lines[0] == (
        "ERROR: baseline_a child exited with status 1: "
        "RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x3 and 2x1)"
    )
    assert lines[1] == "  | last 5 lines of baseline_a's stderr:"
    assert lines[2:4] == ["  |   loading data", "  |   Traceback (most recent call last):"]
    assert lines[6] == "  |   RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x3 and 2x1)"
    assert lines[7] == (
        "  | full log: removed with the run directory; pass work_dir (--work-dir) to keep it"
    )


def test_a_kept_work_dir_says_where_the_full_log_is(tmp_path):
    work_dir = tmp_path / "work"
    result = check_resume(f"{CASES}:CrashingCase", cwd=REPO_ROOT, work_dir=work_dir)
    assert result.outcome is Outcome.ERROR and result.usage_error is None
    log = work_dir.resolve() / "baseline_a" / "stderr.log"
    assert result.message.endswith(f"\nfull log: {log}")
    assert "RuntimeError: mat1 and mat2" in log.read_text()


def test_a_missing_checkpoint_names_the_expected_path_and_what_the_directory_held(tmp_path):
    result = check_resume(
        f"{CASES}:WrongCheckpointNameCase", cwd=REPO_ROOT, temporary_root=tmp_path
    )
    assert result.outcome is Outcome.ERROR
    assert result.message == (
        "baseline_a did not create its declared checkpoint baseline_a/checkpoint.pt; "
        "the phase directory baseline_a held: model.pt, stderr.log, stdout.log\n"
        "baseline_a's stderr is empty"
    )
    assert list(tmp_path.iterdir()) == []

    work_dir = (tmp_path / "kept").resolve()
    kept = check_resume(f"{CASES}:WrongCheckpointNameCase", cwd=REPO_ROOT, work_dir=work_dir)
    assert kept.message.startswith(
        f"baseline_a did not create its declared checkpoint {work_dir}/baseline_a/checkpoint.pt; "
        f"the phase directory {work_dir}/baseline_a held: model.pt, stderr.log, stdout.log"
    )


def test_a_failed_rank_shows_its_own_log(tmp_path):
    work_dir = tmp_path / "work"
    result = check_resume(f"{CASES}:RankCrashingCase", cwd=REPO_ROOT, work_dir=work_dir)
    rank_log = work_dir.resolve() / "baseline_a" / "torchrun/none_x/attempt_0/1/stderr.log"
    assert result.message == (
        "baseline_a child exited with status 1: rank 1 exited with code 1; "
        "its last stderr line: ValueError: rank 1 saw a batch of 3\n"
        "last 2 lines of rank 1's stderr:\n"
        "  [rank1]: Traceback (most recent call last):\n"
        "  [rank1]: ValueError: rank 1 saw a batch of 3\n"
        f"full log: {rank_log}"
    )


def test_log_tail_keeps_the_last_lines_of_a_long_log(tmp_path):
    log = tmp_path / "stderr.log"
    log.write_text("".join(f"line {index}\n\n" for index in range(30)))
    assert log_tail(log) == [f"line {index}" for index in range(30 - TAIL_LINES, 30)]
    log.write_text("x" * 200_000 + "\nlast\n")  # the cut first line is dropped, not shown half
    assert log_tail(log) == ["last"]
    assert log_tail(tmp_path / "missing.log") == []
    assert directory_listing(tmp_path) == "stderr.log"
    (tmp_path / "sub").mkdir()
    assert directory_listing(tmp_path / "sub") == "(nothing)"
