"""check_accumulation end to end, with real fresh processes (ANCHOR_CASES §2.2, §2.3 A5, §2.4).

The clean cases PASS, the eight faults FAIL at their expected phase and path,
unequal initial states ABSTAIN, and case failures, crashes and timeouts come
back as ERROR with a message that says what happened. The file also runs
against TrainParity 0.1.0 (black box); tests of deliberate differences skip
there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import trainparity
import trainparity._internal.accumulation.check as accumulation
import trainparity.api
from trainparity._internal.accumulation.check import AccumulationExecutionPlan
from trainparity._internal.comparison.policies import ToleranceComparison

from tests.helpers import compared_part

ORIGINAL = trainparity.__version__ == "0.1.0"
ours_only = pytest.mark.skipif(ORIGINAL, reason="a deliberate difference from 0.1.0")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

# 0.1.0 defines check_accumulation in trainparity.api only; here it lives in trainparity.accumulation.
check_accumulation = (
    getattr(accumulation, "check_accumulation", None) or trainparity.api.check_accumulation
)

REPOSITORY = Path(__file__).resolve().parent.parent
TOLERANCE = ToleranceComparison(rtol=1e-6, atol=1e-7)
PASS_MESSAGE = "declared executions are equivalent for one optimizer-update boundary"
LOSS_ACCOUNTING_DIFFERENCES = [
    ("loss_accounting.denominator", "missing_candidate"),
    ("loss_accounting.effective_loss", "tensor_value"),
    ("loss_accounting.normalization_captured", "value"),
    ("loss_accounting.numerator", "missing_candidate"),
]


def check(case: str, plan: AccumulationExecutionPlan, **options):
    options.setdefault("comparison", TOLERANCE)
    options.setdefault("timeout", 240)
    return check_accumulation(
        f"tests.fixtures.accumulation_cases:{case}", candidate=plan, cwd=REPOSITORY, **options
    )


def assert_ran_three_fresh_children(result) -> None:
    assert len(result.process_ids) == 3 and len(set(result.process_ids)) == 3
    assert os.getpid() not in result.process_ids
    assert result.verified_equal_initial_state is True
    assert result.comparison_policy == "explicit_tolerance"


# Clean cases ----------------------------------------------------------------------------


def test_linear_case_passes_and_writes_a_self_sized_report(tmp_path):  # A-C1, A5
    report = tmp_path / "reports" / "clean.json"
    result = check("LinearCase", AccumulationExecutionPlan(2), report_path=report)
    assert result.outcome == "PASS", result.message
    assert result.message == PASS_MESSAGE
    assert result.first_observed_phase is None and result.primary_difference is None
    assert result.all_differences == ()
    assert_ran_three_fresh_children(result)
    assert result.loss_normalization_captured is True
    assert result.equivalence == (
        "same four ordered samples; full mean equals summed numerator/denominator"
    )
    assert result.peak_temporary_directory_bytes > 0
    data = report.read_bytes()
    assert data == (json.dumps(result.to_dict(), indent=2, sort_keys=True) + "\n").encode()
    assert result.persisted_artifact_bytes == len(data) > 0


@pytest.mark.parametrize("case", ["MLPCase", "TokenCase"])
def test_clean_cases_pass(case):  # A-C2, A-C3
    result = check(case, AccumulationExecutionPlan(2))
    assert result.outcome == "PASS", result.message
    assert_ran_three_fresh_children(result)
    assert result.loss_normalization_captured is True
    assert result.persisted_artifact_bytes == 0


# The eight faults -----------------------------------------------------------------------


FAULTS = [
    pytest.param(
        "LinearCase",
        AccumulationExecutionPlan(
            2, scale_accumulated_loss=False, use_explicit_loss_accounting=False
        ),
        "loss_accounting",
        LOSS_ACCOUNTING_DIFFERENCES,
        False,
        id="A-F1-missing-scaling",
    ),
    pytest.param(
        "TokenCase",
        AccumulationExecutionPlan(2, use_explicit_loss_accounting=False),
        "loss_accounting",
        LOSS_ACCOUNTING_DIFFERENCES,
        False,
        id="A-F2-mean-of-means",
    ),
    pytest.param(
        "LinearCase",
        AccumulationExecutionPlan(2, optimizer_step_per_microbatch=True),
        "gradient",
        [("gradient.weight", "type")],
        True,
        id="A-F3-optimizer-step-per-microbatch",
    ),
    pytest.param(
        "LinearCase",
        AccumulationExecutionPlan(2, scheduler_step_per_microbatch=True),
        "optimizer_state",
        [("optimizer.param_groups[0].lr", "value")],
        True,
        id="A-F4-scheduler-step-per-microbatch",
        marks=pytest.mark.filterwarnings("ignore:Detected call of"),
    ),
    pytest.param(
        "LinearCase",
        AccumulationExecutionPlan(2, zero_grad_before_gradient_observation=True),
        "gradient",
        [("gradient.weight", "type")],
        True,
        id="A-F5-misplaced-zero-grad",
    ),
    pytest.param(
        "ClipCase",
        AccumulationExecutionPlan(2, clip_grad_norm=1.0, clip_per_microbatch=True),
        "gradient",
        [("gradient.weight", "tensor_value")],
        True,
        id="A-F6-misplaced-clipping",
    ),
    pytest.param(
        "LinearCase",
        AccumulationExecutionPlan(2, omit_final_microbatch=True),
        "loss_accounting",
        [
            ("loss_accounting.denominator", "value"),
            ("loss_accounting.effective_loss", "tensor_value"),
            ("loss_accounting.numerator", "tensor_value"),
        ],
        True,
        id="A-F7-incomplete-final-window",
    ),
    pytest.param(
        "ScalerCase",
        AccumulationExecutionPlan(2, amp_step_before_unscale=True),
        "gradient",
        [("gradient.weight", "tensor_value")],
        True,
        id="A-F8-grad-scaler-timing-on-cpu",
    ),
]


FAULTS_BY_ID = {fault.id: fault.values for fault in FAULTS}

# A child forked warm must behave as a fresh one. What a warm fork could carry over from its
# server is process state, never the case's (each child builds its model from `seed`): the
# modules the server imported (torch, and torch._dynamo, which a fresh child imports at its
# first optimizer.step), warnings already shown, generators, module globals. So every fault
# runs warm, and fresh too for each kind of such state a candidate reaches: an optimizer step
# inside the window (A-F3), a scheduler stepped before its optimizer, which warns (A-F4), the
# amp GradScaler's per-optimizer state (A-F8, the only case with one), and another case
# (A-F2: TokenCase's embedding, and no loss accounting).
# test_fresh_and_warm_starts_give_identical_reports finds each of these fresh reports equal
# to the warm one, but for process evidence. The other faults (A-F1, A-F5, A-F6, A-F7) only
# leave out or move arithmetic their baselines run (the loss scaling, a zero_grad, a clip, the
# last microbatch): pure functions of tensors, the same in any process. A fresh child imports
# torch and torch._dynamo (about 2 s of CPU, three children a check): fresh checks of those
# proved nothing more.
FRESH_FAULTS = (
    "A-F2-mean-of-means",
    "A-F3-optimizer-step-per-microbatch",
    "A-F4-scheduler-step-per-microbatch",
    "A-F8-grad-scaler-timing-on-cpu",
)
FAULT_STARTS = [
    pytest.param(fault.id, start, id=f"{fault.id}-{start}", marks=fault.marks)
    for fault in FAULTS
    for start in ("fresh", "warm")
    if start == "warm" or fault.id in FRESH_FAULTS
]
# What differs between runs or start modes, not between verdicts: the children's PIDs, the
# bytes their logs took, which of them were forked warm.
NOT_COMPARED = ("process_ids", "peak_temporary_directory_bytes")


@pytest.fixture(scope="module")
def fault_check():
    """check_accumulation of one fault in one start mode, run once for the whole module."""
    results = {}

    def checked(fault_id: str, start: str):
        if (fault_id, start) not in results:
            case, plan, *_expected = FAULTS_BY_ID[fault_id]
            results[fault_id, start] = check(case, plan, start=start)
        return results[fault_id, start]

    return checked


@pytest.mark.parametrize(("fault_id", "start"), FAULT_STARTS)
def test_faults_fail_at_their_phase(fault_check, fault_id, start):
    _case, _plan, phase, differences, captured = FAULTS_BY_ID[fault_id]
    result = fault_check(fault_id, start)
    assert result.outcome == "FAIL", result.message
    assert result.first_observed_phase == phase
    assert result.message == f"first observed divergence in {phase}; not a root-cause claim"
    assert [(d.path, d.reason) for d in result.all_differences] == differences
    assert result.primary_difference == result.all_differences[0]
    assert result.loss_normalization_captured is captured
    assert_ran_three_fresh_children(result)


@pytest.mark.parametrize("fault_id", FRESH_FAULTS)
def test_fresh_and_warm_starts_give_identical_reports(fault_check, fault_id):
    fresh, warm = fault_check(fault_id, "fresh"), fault_check(fault_id, "warm")
    assert fresh.to_dict()["environment"].get("child_start") is None
    assert warm.to_dict()["environment"]["child_start"]["warm"] == [
        "baseline_a",
        "baseline_b",
        "candidate",
    ]
    assert compared_part(fresh, NOT_COMPARED) == compared_part(warm, NOT_COMPARED)


def test_fault_details_match_the_recorded_evidence(fault_check):
    # The table's own checks of A-F4 and A-F7 (warm), not a second run of each.
    lr = fault_check("A-F4-scheduler-step-per-microbatch", "warm").primary_difference
    assert (lr.baseline, lr.candidate) == ("0.125", "0.03125")
    assert lr.max_abs_error is None and lr.max_rel_error is None
    window = fault_check("A-F7-incomplete-final-window", "warm")
    denominator = window.primary_difference
    assert (denominator.baseline, denominator.candidate) == ("4.0", "2.0")


# GPU (ANCHOR_CASES §5) ------------------------------------------------------------------


@needs_cuda
@pytest.mark.parametrize("case", ["LinearCase", "MLPCase", "TokenCase"])
def test_clean_cases_pass_on_cuda(case):  # A-C1..A-C3 on the GPU
    result = check(case, AccumulationExecutionPlan(2), device="cuda")
    assert result.outcome == "PASS", result.message
    assert_ran_three_fresh_children(result)


@needs_cuda
def test_amp_case_passes_on_cuda():  # A-C4
    result = check("AmpCase", AccumulationExecutionPlan(2), device="cuda")
    assert result.outcome == "PASS", result.message
    assert_ran_three_fresh_children(result)


@needs_cuda
def test_amp_unscale_timing_fails_at_gradient_on_cuda():  # A-F8
    result = check(
        "AmpCase", AccumulationExecutionPlan(2, amp_step_before_unscale=True), device="cuda"
    )
    assert result.outcome == "FAIL"
    assert [(d.path, d.reason) for d in result.all_differences] == [
        ("gradient.weight", "tensor_value")
    ]


# ABSTAIN --------------------------------------------------------------------------------


def test_unequal_baseline_initial_states_abstain():
    result = check("PidSeededCase", AccumulationExecutionPlan(2))
    assert result.outcome == "ABSTAIN"
    assert result.message == "baseline initial-state self-consistency failed"
    assert result.first_observed_phase == "initial_state"
    assert result.verified_equal_initial_state is False
    assert result.primary_difference.path.startswith("model.weight")


def test_candidate_from_another_initial_state_abstains():
    result = check("CandidateOnlyDriftCase", AccumulationExecutionPlan(2))
    assert result.outcome == "ABSTAIN"
    assert result.message == "candidate did not start from verified-equal initial state"
    assert result.first_observed_phase == "initial_state"
    assert result.verified_equal_initial_state is False
    assert result.primary_difference.path == "rng.torch_cpu"


def test_tied_parameters_abstain_at_initial_capture():  # §2.4 nanoGPT re-creation
    result = check("AliasedWeightCase", AccumulationExecutionPlan(2))
    assert result.outcome == "ABSTAIN"
    assert result.message.startswith("initial state capture failed")
    assert result.verified_equal_initial_state is False
    assert len(result.process_ids) == 1


# ERROR ----------------------------------------------------------------------------------


def test_a_raising_case_method_is_an_error():
    result = check("RaisingLossCase", AccumulationExecutionPlan(2))
    assert result.outcome == "ERROR"
    assert result.message.startswith("worker failed: RuntimeError: loss exploded on purpose")
    assert result.first_observed_phase is None
    assert result.verified_equal_initial_state is False


@ours_only
def test_a_wrong_return_type_is_an_error_that_names_the_method():
    result = check("DictBuildCase", AccumulationExecutionPlan(2))
    assert result.outcome == "ERROR"
    assert result.message == (
        "worker failed: TypeError: case.build() must return a trainparity TrainingState, got dict"
    )


@ours_only
def test_a_crashed_worker_is_an_error_and_its_logs_are_kept_in_work_dir(tmp_path):
    result = check("CrashingWorkerCase", AccumulationExecutionPlan(2), work_dir=tmp_path)
    assert result.outcome == "ERROR"
    first, *rest = result.message.split("\n")
    assert first == "baseline_a child exited with status 3: crashing on purpose"
    assert rest[-1] == f"full log: {tmp_path / 'baseline_a' / 'stderr.log'}"
    assert "crashing on purpose" in (tmp_path / "baseline_a" / "stderr.log").read_text()
    assert len(result.process_ids) == 1


@ours_only
def test_a_crashed_worker_error_quotes_its_last_stderr_line(tmp_path):
    result = check("CrashingWorkerCase", AccumulationExecutionPlan(2), temporary_root=tmp_path)
    first, *rest = result.message.split("\n")
    assert first == "baseline_a child exited with status 3: crashing on purpose"
    assert rest[-2:] == [
        "  crashing on purpose",
        "full log: removed with the run directory; pass work_dir (--work-dir) to keep it",
    ]
    assert list(tmp_path.iterdir()) == []  # the temporary directory is always removed


def test_a_worker_past_its_timeout_is_an_error(tmp_path):
    # The case sleeps 600 s while it builds: any timeout shorter than that ends baseline_a,
    # whether it hits the sleep or the worker's set-up, so a short one waits least.
    result = check("SleepingCase", AccumulationExecutionPlan(2), timeout=2, temporary_root=tmp_path)
    assert result.outcome == "ERROR"
    assert result.message.split("\n")[0] == "baseline_a child exceeded timeout"
    assert list(tmp_path.iterdir()) == []


@ours_only
def test_a_bad_working_directory_is_an_error_result(tmp_path):
    result = check_accumulation(
        "tests.fixtures.accumulation_cases:LinearCase",
        candidate=AccumulationExecutionPlan(2),
        cwd=tmp_path / "missing",
    )
    assert result.outcome == "ERROR"
    assert result.message.startswith("baseline_a child launch failed: ")
    assert result.process_ids == ()


# Execution options ------------------------------------------------------------------------


@ours_only
def test_sequential_execution_gives_the_same_report_and_progress_events(tmp_path):
    events = []
    result = check(
        "EnvironmentCase",
        AccumulationExecutionPlan(2),
        parallel=False,
        progress=events.append,
        environment={"TRAINPARITY_TEST_TOKEN": "present"},
        work_dir=tmp_path,
    )
    assert result.outcome == "PASS", result.message
    started = [event.phase for event in events if event.kind == "start"]
    assert started == ["baseline_a", "baseline_b", "candidate", "comparison"]
    ended = [event for event in events if event.kind == "end"]
    assert all(event.elapsed_seconds >= 0 for event in ended)
    for name in ("baseline_a", "baseline_b", "candidate"):
        assert (tmp_path / name / "result.json").is_file()
        assert (tmp_path / name / "observations.safetensors").is_file()
    missing = check("EnvironmentCase", AccumulationExecutionPlan(2), parallel=True)
    assert missing.outcome == "ERROR"
    assert "TRAINPARITY_TEST_TOKEN" in missing.message


def test_exact_default_passes_the_quickstart_case():  # ANCHOR_CASES §2.5 (docs/api.md)
    result = check_accumulation(
        "trainparity.quickstarts.accumulation:Case", candidate=AccumulationExecutionPlan(2)
    )
    assert result.outcome == "PASS", result.message
    assert result.comparison_policy == "exact"
    assert result.verified_equal_initial_state is True
