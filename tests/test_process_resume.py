"""check_resume on the toy command cases and the resume quickstart (ANCHOR_CASES §1.1, §1.2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import trainparity
import trainparity._internal.resume.execution
from trainparity import ExactComparison, Outcome, ToleranceComparison
from trainparity._internal.resume.check import ProcessResumeRunner

REPO_ROOT = Path(__file__).resolve().parents[1]
CASE_MODULE = "tests.fixtures.process_resume_cases"
TOTAL_STEP = 4
PHASES = ("baseline_a", "baseline_b", "candidate_split", "candidate_resume")
SELF_CONSISTENCY_MESSAGE = "baseline self-consistency failed; resume attribution is unsafe"
ORIGINAL_RELEASE = trainparity.__version__ == "0.1.0"
# fresh_resume_processes_distinct where the resume did not run: ours says nothing (None)
# rather than the original's "no" (docs/compatibility.md).
RESUME_NOT_RUN = False if ORIGINAL_RELEASE else None


def case_spec(class_name: str) -> str:
    return f"{CASE_MODULE}:{class_name}"


def check(class_name: str, temporary_root: Path, **options) -> trainparity.api.ProcessResumeResult:
    """check_resume on one toy case, launched from the repository root so children import it."""
    return trainparity.check_resume(
        case_spec(class_name), cwd=REPO_ROOT, temporary_root=temporary_root, **options
    )


def run_with_runner(class_name: str, temporary_root: Path, *, timeout: float = 300.0, **options):
    runner = ProcessResumeRunner(timeout=timeout, temporary_root=temporary_root)
    return runner.run(case_spec(class_name), cwd=REPO_ROOT, **options)


def semantic_part(result) -> dict[str, object]:
    """The report minus what legitimately varies between runs: PIDs, timings, byte counts."""
    report = json.loads(json.dumps(result.to_dict()))
    for varying_key in (
        "processes",
        "timing_seconds",
        "snapshot_ipc_bytes",
        "checkpoint_max_bytes",
    ):
        report.pop(varying_key)
    return report


def difference_paths(result) -> list[tuple[str, str]]:
    return [(difference.path, difference.reason) for difference in result.all_differences]


# R1: omitting `comparison`, passing None and passing ExactComparison() are the same check.
CALL_FORMS = {
    "omitted": {},
    "none": {"comparison": None},
    "exact": {"comparison": ExactComparison()},
}


R1_CASES = (
    "DeterministicProcessCase",
    "CandidateLargeDifferenceProcessCase",
    "NondeterministicProcessCase",
)


@pytest.fixture(scope="module")
def results_by_call_form(tmp_path_factory):
    """Runs each case once per call form, on first use, and shares the results (also with R8)."""
    results_by_case: dict[str, dict[str, object]] = {}

    def results_for(class_name: str) -> dict[str, object]:
        if class_name not in results_by_case:
            results_by_case[class_name] = {
                form: check(class_name, tmp_path_factory.mktemp(f"r1-{form}"), **options)
                for form, options in CALL_FORMS.items()
            }
        return results_by_case[class_name]

    return results_for


@pytest.mark.parametrize("class_name", R1_CASES)
def test_r1_default_none_and_exact_comparison_agree(results_by_call_form, class_name):
    results = results_by_call_form(class_name)
    summaries = {
        (
            result.outcome,
            result.message,
            result.first_divergent_step,
            result.primary_difference.path if result.primary_difference else None,
            result.comparison_policy,
            result.comparison_rtol,
            result.comparison_atol,
            result.comparison_equal_nan,
        )
        for result in results.values()
    }
    assert len(summaries) == 1
    for result in results.values():
        report = result.to_dict()
        assert report["schema_version"] == 2
        assert report["comparison_policy"] == "exact"
        assert report["comparison_rtol"] is None
        assert report["comparison_atol"] is None
        assert report["comparison_equal_nan"] is None


def test_r1_deterministic_case_passes(results_by_call_form):
    result = results_by_call_form("DeterministicProcessCase")["omitted"]
    assert result.outcome is Outcome.PASS
    assert result.message == "final states are exactly equivalent at step 4"
    assert result.first_divergent_step is None
    assert result.primary_difference is None
    assert result.all_differences == ()
    assert result.fresh_resume_processes_distinct


def test_r1_large_candidate_difference_fails_at_the_weight(results_by_call_form):
    result = results_by_call_form("CandidateLargeDifferenceProcessCase")["omitted"]
    assert result.outcome is Outcome.FAIL
    assert result.message == "first observed divergence at step 4: model.weight"
    assert result.first_divergent_step == TOTAL_STEP
    assert difference_paths(result) == [
        ("model.weight", "tensor_value"),
        ("optimizer.momentum", "tensor_value"),
    ]
    assert result.primary_difference.max_abs_error == pytest.approx(0.25)
    assert result.fresh_resume_processes_distinct


def test_r1_nondeterministic_case_abstains_at_the_nonce(results_by_call_form):
    result = results_by_call_form("NondeterministicProcessCase")["omitted"]
    assert result.outcome is Outcome.ABSTAIN
    assert result.message == SELF_CONSISTENCY_MESSAGE
    assert result.first_divergent_step == TOTAL_STEP
    assert difference_paths(result) == [("process_nonce", "value")]
    assert result.fresh_resume_processes_distinct is RESUME_NOT_RUN


@pytest.mark.parametrize("class_name", R1_CASES[:2])
def test_r1_report_is_stable_across_repeated_checks(results_by_call_form, class_name):
    # The nondeterministic case is left out: its differences quote process IDs.
    results = results_by_call_form(class_name).values()
    reports = {json.dumps(semantic_part(result), sort_keys=True) for result in results}
    assert len(reports) == 1


def test_r2_tiny_candidate_difference_fails_exact_and_passes_declared_tolerance(tmp_path):
    exact = check("CandidateTinyDifferenceProcessCase", tmp_path / "exact")
    assert exact.outcome is Outcome.FAIL
    assert exact.primary_difference.path == "model.weight"

    report_path = tmp_path / "reports" / "tolerance.json"
    tolerant = check(
        "CandidateTinyDifferenceProcessCase",
        tmp_path / "tolerance",
        comparison=ToleranceComparison(rtol=1e-5, atol=1e-7, equal_nan=False),
        report_path=report_path,
    )
    assert tolerant.outcome is Outcome.PASS
    assert tolerant.message == "final states are equivalent under the declared tolerance at step 4"
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert report["schema_version"] == 2
    assert report["comparison_policy"] == "explicit_tolerance"
    assert report["comparison_rtol"] == 1e-5
    assert report["comparison_atol"] == 1e-7
    assert report["comparison_equal_nan"] is False
    assert json.dumps(report, sort_keys=True) == json.dumps(tolerant.to_dict(), sort_keys=True)


def test_r3_large_difference_under_tolerance_fails_with_error_magnitudes(tmp_path):
    result = check(
        "CandidateLargeDifferenceProcessCase",
        tmp_path,
        comparison=ToleranceComparison(rtol=1e-6, atol=1e-8),
    )
    assert result.outcome is Outcome.FAIL
    assert result.primary_difference.path == "model.weight"
    assert result.primary_difference.max_abs_error is not None
    assert result.primary_difference.max_rel_error is not None


@pytest.mark.parametrize(
    ("class_name", "comparison", "expected_outcome"),
    [
        ("BaselineTinyDifferenceProcessCase", None, Outcome.ABSTAIN),
        (
            "BaselineTinyDifferenceProcessCase",
            ToleranceComparison(rtol=1e-5, atol=1e-7),
            Outcome.PASS,
        ),
        (
            "BaselineLargeDifferenceProcessCase",
            ToleranceComparison(rtol=1e-6, atol=1e-8),
            Outcome.ABSTAIN,
        ),
    ],
    ids=["tiny-exact", "tiny-tolerance", "large-tolerance"],
)
def test_r4_declared_policy_governs_the_baseline_self_check(
    tmp_path, class_name, comparison, expected_outcome
):
    result = check(class_name, tmp_path, comparison=comparison)
    assert result.outcome is expected_outcome
    if expected_outcome is Outcome.ABSTAIN:
        assert result.message == SELF_CONSISTENCY_MESSAGE
        assert result.primary_difference.path == "model.weight"
        assert [process.phase for process in result.processes] == ["baseline_a", "baseline_b"]


@pytest.mark.parametrize(
    "comparison", ["tolerance", {}, 1e-6, lambda a, b: True], ids=["str", "dict", "float", "lambda"]
)
def test_r5_comparison_must_be_an_explicit_policy(tmp_path, comparison):
    with pytest.raises(
        TypeError, match="comparison must be explicit ExactComparison or ToleranceComparison"
    ):
        check("DeterministicProcessCase", tmp_path, comparison=comparison)
    assert list(tmp_path.iterdir()) == []


def test_r6_environment_reaches_children_and_only_its_keys_are_reported(tmp_path):
    scratch = tmp_path / "scratch"
    report_path = tmp_path / "report.json"
    environment = {
        "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1",
        "TRAINPARITY_REQUIRE_TORCH_FORCE": "1",
        "TRAINPARITY_TEST_SECRET": "do-not-report-this-value",
    }
    result = run_with_runner(
        "DeterministicProcessCase", scratch, report_path=report_path, environment=environment
    )
    # The trainer refuses to run unless the first two variables arrived, so PASS proves propagation.
    assert result.outcome is Outcome.PASS
    assert result.fresh_resume_processes_distinct
    assert [process.phase for process in result.processes] == list(PHASES)
    assert result.processes[2].pid != result.processes[3].pid
    for key in (
        "single_normal_run",
        "baseline_self_consistency",
        "candidate_save_exit_new_process_load_resume",
        "snapshot_capture",
        "serialization",
        "comparison",
        "total_wall",
        "end_to_end_multiplier",
    ):
        assert result.timing_seconds[key] >= 0
    assert result.propagated_environment_keys == tuple(sorted(environment))
    report_text = report_path.read_text(encoding="utf-8")
    assert "do-not-report-this-value" not in report_text
    assert json.loads(report_text)["outcome"] == "PASS"
    assert list(scratch.iterdir()) == []


def rewind_scheduler_by_one_epoch(staged_checkpoint: Path) -> None:
    checkpoint = torch.load(staged_checkpoint, map_location="cpu", weights_only=True)
    checkpoint["scheduler"]["last_epoch"] -= 1
    torch.save(checkpoint, staged_checkpoint)


def test_r7_staged_checkpoint_fault_fails_at_the_edited_counter(tmp_path):
    result = run_with_runner(
        "DeterministicProcessCase",
        tmp_path,
        staged_checkpoint_hook=rewind_scheduler_by_one_epoch,
    )
    assert result.outcome is Outcome.FAIL
    assert result.first_divergent_step == TOTAL_STEP
    assert result.message == "first observed divergence at step 4: scheduler.last_epoch"
    assert difference_paths(result) == [("scheduler.last_epoch", "value")]
    assert (result.primary_difference.baseline, result.primary_difference.candidate) == ("4", "3")
    assert result.fresh_resume_processes_distinct


def test_r8_nondeterministic_baselines_abstain(results_by_call_form):
    result = results_by_call_form("NondeterministicProcessCase")["exact"]
    assert result.outcome is Outcome.ABSTAIN
    assert "self-consistency" in result.message


# The original uses a 10 s timeout for the cases that do not test timeouts; a
# longer one keeps them independent of machine load without changing them.
@pytest.mark.parametrize(
    ("class_name", "timeout", "expected_outcome", "expected_message", "our_detail"),
    [
        (
            "ErrorProcessCase",
            120.0,
            Outcome.ERROR,
            "baseline_a child exited with status 1",
            # Ours adds the last lines of the child's stderr (docs/compatibility.md).
            ": RuntimeError: intentional child failure\nlast ",
        ),
        ("SlowProcessCase", 0.1, Outcome.ERROR, "baseline_a child exceeded timeout", "\n"),
        (
            "UnsupportedProcessCase",
            120.0,
            Outcome.ABSTAIN,
            "baseline_a checkpoint observation failed: snapshot state is unsupported: UnsupportedStateError",
            # Ours also names the path and type (docs/compatibility.md).
            ": unsupported state at unsupported: builtins.object",
        ),
        (
            "MissingCase",
            120.0,
            Outcome.ERROR,
            "process case setup failed: ",
            # Ours keeps the cause instead of the type name (docs/compatibility.md).
            "cannot import case 'tests.fixtures.process_resume_cases:MissingCase': ",
        ),
    ],
    ids=["child-error", "timeout", "unsupported", "missing-case"],
)
def test_r9_failures_become_results(
    tmp_path, class_name, timeout, expected_outcome, expected_message, our_detail
):
    result = run_with_runner(class_name, tmp_path, timeout=timeout)
    assert result.outcome is expected_outcome
    if trainparity.__version__ == "0.1.0":
        assert result.message == expected_message
    elif our_detail.endswith(("\n", "last ", ": ")):  # followed by stderr lines or a cause
        assert result.message.startswith(expected_message + our_detail)
    else:
        assert result.message == expected_message + our_detail
    assert result.fresh_resume_processes_distinct is RESUME_NOT_RUN
    assert list(tmp_path.iterdir()) == []


def test_r10_non_positive_timeout_raises(tmp_path):
    with pytest.raises(ValueError, match="timeout must be positive"):
        ProcessResumeRunner(timeout=0)
    with pytest.raises(ValueError, match="timeout must be positive"):
        check("DeterministicProcessCase", tmp_path, timeout=0)


def test_r10_invalid_environment_key_is_a_setup_error(tmp_path):
    result = run_with_runner("DeterministicProcessCase", tmp_path, environment={"BAD=KEY": "value"})
    assert result.outcome is Outcome.ERROR
    assert result.message == (
        "process case setup failed: ValueError"
        if ORIGINAL_RELEASE
        else "process case setup failed: invalid environment variable name or value: 'BAD=KEY'"
    )
    assert result.processes == ()


def test_r11_checkpoint_path_error_after_a_child_keeps_its_evidence(tmp_path):
    result = check("PostRunCheckpointPathErrorCase", tmp_path)
    assert result.outcome is Outcome.ERROR
    assert result.message.startswith(
        "baseline_a checkpoint path resolution after child completion failed: FileNotFoundError"
    )
    assert [(process.phase, process.returncode) for process in result.processes] == [
        ("baseline_a", 0)
    ]


def test_r12_checkpoint_path_error_before_the_resume_launch(tmp_path):
    result = check("CandidateResumeCheckpointPathErrorCase", tmp_path)
    assert result.outcome is Outcome.ERROR
    assert result.message.startswith(
        "candidate_resume checkpoint path resolution before child launch failed: FileNotFoundError"
    )
    assert [process.phase for process in result.processes] == list(PHASES[:3])


@pytest.mark.parametrize(
    ("class_name", "expected_message"),
    [
        (
            "CommandCallbackErrorCase",
            "baseline_a command callback or validation failed: RuntimeError",
        ),
        (
            "ObservationCallbackErrorCase",
            "baseline_a checkpoint observation failed: observe_checkpoint callback failed: RuntimeError",
        ),
    ],
    ids=["command", "observe_checkpoint"],
)
def test_r13_callback_exceptions_are_errors(tmp_path, class_name, expected_message):
    result = check(class_name, tmp_path)
    assert result.outcome is Outcome.ERROR
    assert result.message.startswith(expected_message)  # ours adds the exception's text


def test_r14_system_exit_from_a_callback_propagates(tmp_path):
    with pytest.raises(SystemExit) as raised:
        check("SystemExitCommandCase", tmp_path)
    assert raised.value.code == 7


def test_r15_staging_copy_failure_is_an_error(tmp_path, monkeypatch):
    def refuse_to_copy(*arguments, **options):
        raise OSError("intentional staging failure")

    monkeypatch.setattr(trainparity._internal.resume.execution.shutil, "copy2", refuse_to_copy)
    result = check("DeterministicProcessCase", tmp_path)
    assert result.outcome is Outcome.ERROR
    assert result.message == "candidate_resume checkpoint staging failed: OSError"
    assert [process.phase for process in result.processes] == list(PHASES[:3])


def test_r16_preserved_work_dir_keeps_the_failing_childs_stderr(tmp_path):
    work_dir = tmp_path / "runs"
    result = trainparity.check_resume(
        case_spec("ErrorProcessCase"), cwd=REPO_ROOT, work_dir=work_dir
    )
    assert result.outcome is Outcome.ERROR
    stderr_path = (work_dir / "baseline_a" / "stderr.log").resolve()
    assert result.message.endswith(f"full log: {stderr_path}") or ORIGINAL_RELEASE
    stderr_log = work_dir / "baseline_a" / "stderr.log"
    assert "intentional child failure" in stderr_log.read_text(encoding="utf-8")


@pytest.mark.skipif(
    ORIGINAL_RELEASE,
    reason="deliberate difference: TrainParity 0.1.0 raises AttributeError for str paths",
)
def test_str_paths_are_accepted_like_path_objects(tmp_path):
    work_dir = tmp_path / "runs"
    report_path = tmp_path / "report.json"
    preserved = trainparity.check_resume(
        case_spec("ErrorProcessCase"),
        cwd=str(REPO_ROOT),
        work_dir=str(work_dir),
        report_path=str(report_path),
    )
    assert preserved.outcome is Outcome.ERROR
    assert preserved.message.startswith("baseline_a child exited with status 1")
    assert (work_dir / "baseline_a" / "stderr.log").is_file()
    assert json.loads(report_path.read_text(encoding="utf-8"))["outcome"] == "ERROR"

    temporary_root = tmp_path / "scratch"
    temporary = trainparity.check_resume(
        case_spec("ErrorProcessCase"), cwd=str(REPO_ROOT), temporary_root=str(temporary_root)
    )
    assert temporary.message.startswith("baseline_a child exited with status 1")
    assert list(temporary_root.iterdir()) == []


# RQ: the installed resume quickstart, run as its own program and used as a library.
QUICKSTART = "trainparity.quickstarts.resume"


@pytest.fixture(scope="module")
def quickstart_run(tmp_path_factory):
    return subprocess.run(
        [sys.executable, "-m", QUICKSTART, "--json"],
        cwd=tmp_path_factory.mktemp("quickstart"),
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_rq_quickstart_exits_zero_with_clean_pass_and_intentional_fail(quickstart_run):
    assert quickstart_run.returncode == 0, quickstart_run.stderr
    payload = json.loads(quickstart_run.stdout)
    assert set(payload) == {"schema_version", "trainparity_version", "clean", "intentional_fail"}
    assert payload["schema_version"] == 2
    assert payload["trainparity_version"] == trainparity.__version__
    for key, class_name in (("clean", "CleanCase"), ("intentional_fail", "FaultyCase")):
        report = payload[key]
        assert report["case"] == f"{QUICKSTART}:{class_name}"
        assert report["schema_version"] == 2
        assert [process["phase"] for process in report["processes"]] == list(PHASES)
        assert report["fresh_resume_processes_distinct"] is True
        assert report["propagated_environment_keys"] == []
        assert report["comparison_policy"] == "exact"
        assert report["comparison_rtol"] is None
        assert report["comparison_atol"] is None
        assert report["comparison_equal_nan"] is None
        assert report["snapshot_ipc_bytes"] > 0
        assert report["checkpoint_max_bytes"] > 0
        assert isinstance(report["timing_seconds"], dict)


def test_rq_quickstart_clean_passes_and_fault_fails_at_the_scheduler(quickstart_run):
    payload = json.loads(quickstart_run.stdout)
    clean, fault = payload["clean"], payload["intentional_fail"]
    assert clean["outcome"] == "PASS"
    assert clean["message"] == "final states are exactly equivalent at step 4"
    assert clean["primary_difference"] is None
    assert clean["all_differences"] == []
    assert fault["outcome"] == "FAIL"
    assert fault["message"] == "first observed divergence at step 4: scheduler.last_epoch"
    assert fault["first_divergent_step"] == TOTAL_STEP
    expected_difference = {
        "path": "scheduler.last_epoch",
        "reason": "value",
        "baseline": "4",
        "candidate": "2",
        "max_abs_error": None,
        "max_rel_error": None,
    }
    assert fault["primary_difference"] == expected_difference
    assert fault["all_differences"] == [expected_difference]


def test_rq_quickstart_says_both_verdicts_first_in_four_lines(quickstart_run):
    # Issue 53, finding 5: without --json the quickstart prints these lines, not 423 of JSON.
    from trainparity.quickstarts._payload import summary

    lines = summary(json.loads(quickstart_run.stdout)).splitlines()
    assert lines[:4] == [
        "clean: PASS  final states are exactly equivalent at step 4",
        f"  case {QUICKSTART}:CleanCase",
        "intentional_fail: FAIL  first observed divergence at step 4: scheduler.last_epoch",
        "  scheduler.last_epoch: 4 in the baseline, 2 in the candidate",
    ]
    assert lines[4].startswith("as expected: ") and "--json prints both reports" in lines[4]


def test_rq_quickstart_case_passes_under_a_declared_tolerance(tmp_path):
    result = trainparity.check_resume(
        f"{QUICKSTART}:CleanCase",
        comparison=ToleranceComparison(rtol=1e-6, atol=1e-8),
        temporary_root=tmp_path,
    )
    assert result.outcome is Outcome.PASS
    assert result.fresh_resume_processes_distinct


def test_rq_unit_training_helper_resumes_with_the_scheduler_fault(tmp_path):
    from trainparity.quickstarts import resume as quickstart

    # Ours names the helper `train`; the original's is private (`_train`).
    train = getattr(quickstart, "train", None) or quickstart._train
    train(tmp_path / "split", 2, None, False)
    split = torch.load(tmp_path / "split" / "checkpoint.pt", weights_only=True)
    assert split["step"] == split["scheduler"]["last_epoch"] == 2

    train(tmp_path / "resumed", 4, tmp_path / "split" / "checkpoint.pt", True)
    resumed = torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=True)
    assert resumed["step"] == 4
    assert resumed["scheduler"]["last_epoch"] == 2
