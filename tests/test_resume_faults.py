"""check_resume against the 13 reference resume faults and their controls (ANCHOR_CASES §1.3)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import trainparity
from trainparity import Outcome
from trainparity._internal.resume.check import ProcessResumeRunner

from tests.helpers import compared_part

REPO_ROOT = Path(__file__).resolve().parents[1]
CASE_MODULE = "tests.fixtures.resume_faults"
TOTAL_STEP = 4
PHASES = ("baseline_a", "baseline_b", "candidate_split", "candidate_resume")
ON_CPU = os.environ.get("TRAINPARITY_DEVICE", "cpu") == "cpu"
CPU_ONLY = {"TRAINPARITY_DEVICE": "cpu"}
CUDA_ONLY = {"TRAINPARITY_DEVICE": "cuda"}
needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="the fault concerns CUDA-only state"
)


def case_spec(class_name: str) -> str:
    return f"{CASE_MODULE}:{class_name}"


def check(class_name: str, temporary_root: Path, **options):
    """check_resume on one fault case, launched from the repository root so children import it."""
    return trainparity.check_resume(
        case_spec(class_name), cwd=REPO_ROOT, temporary_root=temporary_root, **options
    )


@dataclass(frozen=True)
class FaultExpectation:
    """What the final-state comparison reports for one fault.

    `primary` is the first difference in traversal order (often downstream of the
    fault); `fault_paths` are the faulty component's own paths, which must be among
    the differences; `cpu_paths` is every differing path as observed on CPU;
    `primary_values` are the primary difference's (baseline, candidate) summaries
    where the primary is a plain counter.
    """

    primary: tuple[str, str]
    fault_paths: tuple[str, ...]
    cpu_paths: tuple[str, ...]
    primary_values: tuple[str, str] | None = None
    environment: dict[str, str] | None = None


PARAMETER_PATHS = (
    "model.bias",
    "model.weight",
    'optimizer.state["0"].momentum_buffer',
    'optimizer.state["1"].momentum_buffer',
)
GROUP_LR_PATHS = (
    "optimizer.param_groups[0].lr",
    "optimizer.param_groups[1].lr",
)
LAST_LR_PATHS = ("scheduler._last_lr[0]", "scheduler._last_lr[1]")

FAULTS = {
    "MissingModelCase": FaultExpectation(
        primary=("model.bias", "tensor_value"),
        fault_paths=("model.bias", "model.weight", 'optimizer.state["0"].momentum_buffer'),
        cpu_paths=PARAMETER_PATHS,
    ),
    "MissingOptimizerCase": FaultExpectation(
        primary=("model.bias", "tensor_value"),
        fault_paths=("optimizer.param_groups[0].lr", 'optimizer.state["0"].momentum_buffer'),
        cpu_paths=(*PARAMETER_PATHS[:2], *GROUP_LR_PATHS, *PARAMETER_PATHS[2:], *LAST_LR_PATHS),
    ),
    # The learning rate happens to coincide at step 4: only the counters differ.
    "MissingSchedulerCase": FaultExpectation(
        primary=("scheduler._step_count", "value"),
        fault_paths=("scheduler._step_count", "scheduler.last_epoch"),
        cpu_paths=("scheduler._step_count", "scheduler.last_epoch"),
        primary_values=("5", "3"),
    ),
    # Re-seeded Python/numpy generators differ only in their position word at step 4.
    "MissingPythonRngCase": FaultExpectation(
        primary=("model.bias", "tensor_value"),
        fault_paths=("rng.python[1][624]",),
        cpu_paths=(*PARAMETER_PATHS, "rng.python[1][624]"),
    ),
    "MissingNumpyRngCase": FaultExpectation(
        primary=("model.bias", "tensor_value"),
        fault_paths=("rng.numpy.position",),
        cpu_paths=(*PARAMETER_PATHS, "rng.numpy.position"),
    ),
    # On a GPU the training draws use the CUDA generator, which would hide this fault.
    "MissingTorchCpuRngCase": FaultExpectation(
        primary=("model.bias", "tensor_value"),
        fault_paths=("rng.torch_cpu",),
        cpu_paths=(*PARAMETER_PATHS, "rng.torch_cpu"),
        environment=CPU_ONLY,
    ),
    "CursorOffsetCase": FaultExpectation(
        primary=("batch.sample_ids[0]", "value"),
        fault_paths=("batch.sample_ids[0]", "batch.sample_ids[1]"),
        cpu_paths=("batch.sample_ids[0]", "batch.sample_ids[1]", *PARAMETER_PATHS),
        primary_values=("6", "7"),
    ),
    # With a `while step < end_step` loop the resumed run trains one step too few.
    "StepOffByOneCase": FaultExpectation(
        primary=("batch.sample_ids[0]", "value"),
        fault_paths=("batch.sample_ids[0]", "extra.hidden_module_counter"),
        cpu_paths=(
            "batch.sample_ids[0]",
            "batch.sample_ids[1]",
            "extra.hidden_module_counter",
            *PARAMETER_PATHS[:2],
            *GROUP_LR_PATHS,
            *PARAMETER_PATHS[2:],
            "rng.numpy.position",
            "rng.python[1][624]",
            "rng.torch_cpu",
            *LAST_LR_PATHS,
            "scheduler._step_count",
            "scheduler.last_epoch",
        ),
        primary_values=("6", "4"),
    ),
    "OptimizerGroupMismatchCase": FaultExpectation(
        primary=("model.bias", "tensor_value"),
        fault_paths=GROUP_LR_PATHS,
        cpu_paths=(*PARAMETER_PATHS[:2], *GROUP_LR_PATHS, *PARAMETER_PATHS[2:], *LAST_LR_PATHS),
    ),
    "ExtraSchedulerStepCase": FaultExpectation(
        primary=("model.bias", "tensor_value"),
        fault_paths=("scheduler._step_count", "scheduler.last_epoch"),
        cpu_paths=(
            "model.bias",
            "model.weight",
            "scheduler._step_count",
            "scheduler.last_epoch",
        ),
    ),
    "MissingHiddenGlobalCase": FaultExpectation(
        primary=("extra.hidden_module_counter", "value"),
        fault_paths=("extra.hidden_module_counter",),
        cpu_paths=("extra.hidden_module_counter",),
        primary_values=("4", "2"),
    ),
}


def assert_fault_is_found(result, expectation: FaultExpectation, on_cpu: bool) -> None:
    primary_path, primary_reason = expectation.primary
    assert result.outcome is Outcome.FAIL, result.message
    assert result.message == f"first observed divergence at step 4: {primary_path}"
    assert result.first_divergent_step == TOTAL_STEP
    assert (result.primary_difference.path, result.primary_difference.reason) == (
        primary_path,
        primary_reason,
    )
    assert result.primary_difference == result.all_differences[0]
    if expectation.primary_values is not None:
        primary = result.primary_difference
        assert (primary.baseline, primary.candidate) == expectation.primary_values
    paths = [difference.path for difference in result.all_differences]
    assert set(expectation.fault_paths) <= set(paths)
    if on_cpu:
        assert tuple(paths) == expectation.cpu_paths
    assert result.fresh_resume_processes_distinct
    assert [process.phase for process in result.processes] == list(PHASES)


# A child forked warm must behave as a fresh one. What a warm fork could carry over from its
# server is process state, not what the checkpoint file holds: the generators (Python's,
# NumPy's, torch's CPU one) and module globals. So every fault runs warm, and fresh too where
# the faulty component is that state, plus StepOffByOneCase, whose report has a difference
# in every component of the state; test_fresh_and_warm_starts_give_identical_reports finds
# each of these fresh reports equal to the warm one, but for timings and process evidence.
# The other faults (model, optimizer, scheduler, cursor, swapped groups, an extra scheduler
# step) differ only in what the file restores. A fresh child imports torch (about 2 s of
# CPU): the fresh checks share their baselines (reuse_baselines; the key holds the start mode).
FRESH_FAULTS = (
    "MissingPythonRngCase",
    "MissingNumpyRngCase",
    "MissingTorchCpuRngCase",
    "MissingHiddenGlobalCase",
    "StepOffByOneCase",
)
FAULT_STARTS = [
    pytest.param(class_name, start, id=f"{class_name}-{start}")
    for class_name in FAULTS
    for start in ("fresh", "warm")
    if start == "warm" or class_name in FRESH_FAULTS
]
# What a report holds besides its comparison part: timings, process evidence (PIDs, which
# children started warm), the baseline cache's word.
NOT_COMPARED = ("timing_seconds", "processes", "baselines_reused")


def environment_of(expectation: FaultExpectation) -> dict[str, str] | None:
    """The environment a fault's check gives its children.

    On a CPU run (ON_CPU) the children train on the CPU without TRAINPARITY_DEVICE=cpu: the
    variable would change nothing they compute, only the baselines' cache key and the warm
    server (a distinct environment starts its own, which imports torch again). Without it,
    every fault shares the fresh checks' baselines and this worker's warm server.
    """
    return None if ON_CPU else expectation.environment


@pytest.fixture(scope="module")
def fault_check(tmp_path_factory: pytest.TempPathFactory):
    """check_resume of one fault in one start mode, run once for the whole module."""
    results = {}
    baselines = tmp_path_factory.mktemp("baseline-cache")

    def checked(class_name: str, start: str):
        if (class_name, start) not in results:
            results[class_name, start] = check(
                class_name,
                tmp_path_factory.mktemp(f"{class_name}-{start}"),
                environment=environment_of(FAULTS[class_name]),
                start=start,
                reuse_baselines=baselines if start == "fresh" else False,
            )
        return results[class_name, start]

    return checked


@pytest.mark.parametrize(("class_name", "start"), FAULT_STARTS)
def test_fault_fails_at_its_observed_first_path(fault_check, class_name, start):
    expectation = FAULTS[class_name]
    result = fault_check(class_name, start)
    assert_fault_is_found(result, expectation, on_cpu=ON_CPU or expectation.environment == CPU_ONLY)


@pytest.mark.parametrize("class_name", FRESH_FAULTS)
def test_fresh_and_warm_starts_give_identical_reports(fault_check, class_name):
    fresh, warm = fault_check(class_name, "fresh"), fault_check(class_name, "warm")
    assert fresh.to_dict()["environment"].get("child_start") is None
    assert warm.to_dict()["environment"]["child_start"]
    assert compared_part(fresh, NOT_COMPARED) == compared_part(warm, NOT_COMPARED)


@needs_cuda
def test_missing_cuda_rng_fails_downstream_and_shows_the_generator(tmp_path):
    result = check("MissingCudaRngCase", tmp_path, environment=CUDA_ONLY)
    assert result.outcome is Outcome.FAIL
    assert result.primary_difference.path == "model.bias"
    assert "rng.torch_cuda[0]" in [difference.path for difference in result.all_differences]


@needs_cuda
def test_missing_grad_scaler_fails_only_at_the_scale(tmp_path):
    # Power-of-two loss scaling is exact, so the parameters agree; only the scale differs.
    result = check("MissingGradScalerCase", tmp_path, environment=CUDA_ONLY)
    assert result.outcome is Outcome.FAIL
    assert [(d.path, d.reason) for d in result.all_differences] == [("scaler.scale", "value")]
    assert (result.primary_difference.baseline, result.primary_difference.candidate) == (
        repr(2.0**20),
        repr(2.0**18),
    )


@pytest.mark.parametrize("repeat", range(3))
def test_clean_case_passes_on_every_repeat(tmp_path, repeat):
    result = check("DeterministicCase", tmp_path)
    assert result.outcome is Outcome.PASS
    assert result.message == "final states are exactly equivalent at step 4"
    assert result.all_differences == ()
    assert result.fresh_resume_processes_distinct
    assert [process.phase for process in result.processes] == list(PHASES)


@pytest.mark.parametrize(
    ("case", "timeout", "expected_outcome", "expected_message"),
    [
        (
            case_spec("NondeterministicCase"),
            300.0,
            Outcome.ABSTAIN,
            "baseline self-consistency failed; resume attribution is unsafe",
        ),
        (
            case_spec("ChildExceptionCase"),
            300.0,
            Outcome.ERROR,
            "baseline_a child exited with status 1",
        ),
        (
            case_spec("CorruptCheckpointCase"),
            300.0,
            Outcome.ERROR,
            "baseline_a checkpoint observation failed: observe_checkpoint callback failed: UnpicklingError",
        ),
        (
            case_spec("MissingCheckpointCase"),
            300.0,
            Outcome.ERROR,
            "baseline_a did not create its declared checkpoint",
        ),
        (case_spec("SlowCase"), 0.2, Outcome.ERROR, "baseline_a child exceeded timeout"),
        (
            "not_a_real_module:Case",
            300.0,
            Outcome.ERROR,
            "process case setup failed: cannot import case 'not_a_real_module:Case'",
        ),
        (
            case_spec("SplitAtTotalCase"),
            300.0,
            Outcome.ERROR,
            "process case setup failed: need 0 < split_step < total_step, got 2 and 2",
        ),
    ],
    ids=[
        "nondeterministic",
        "child-exception",
        "corrupt-checkpoint",
        "missing-checkpoint",
        "slow",
        "import-error",
        "split-equals-total",
    ],
)
def test_prototype_control(tmp_path, case, timeout, expected_outcome, expected_message):
    result = trainparity.check_resume(case, cwd=REPO_ROOT, temporary_root=tmp_path, timeout=timeout)
    assert result.outcome is expected_outcome
    # Ours adds the cause: a child's last stderr lines, the missing module (docs/compatibility.md).
    assert result.message.startswith(expected_message)
    # The resume did not run: ours says nothing rather than "no" (docs/compatibility.md).
    assert result.fresh_resume_processes_distinct is (
        False if trainparity.__version__ == "0.1.0" else None
    )
    if expected_outcome is Outcome.ABSTAIN:
        assert result.first_divergent_step == TOTAL_STEP
        assert result.primary_difference.path == "model.bias"
    assert list(tmp_path.iterdir()) == []


STAGED_DIRECTORY_FILES = ["model.pt", "optimization.pt", "progress.pt"]


@pytest.mark.skipif(
    trainparity.__version__ == "0.1.0",
    reason="deliberate difference: TrainParity 0.1.0 stages single-file checkpoints only",
)
def test_directory_checkpoint_is_staged_whole(tmp_path):
    staged_listings: list[list[str]] = []

    def advance_hidden_counter(staged_directory: Path) -> None:
        staged_listings.append(sorted(entry.name for entry in staged_directory.iterdir()))
        progress_file = staged_directory / "progress.pt"
        progress = torch.load(progress_file, map_location="cpu", weights_only=True)
        progress["hidden"] += 10
        torch.save(progress, progress_file)

    runner = ProcessResumeRunner(temporary_root=tmp_path)
    result = runner.run(
        case_spec("DirectoryCheckpointCase"),
        cwd=REPO_ROOT,
        staged_checkpoint_hook=advance_hidden_counter,
    )
    assert staged_listings == [STAGED_DIRECTORY_FILES]
    # Everything else the resumed child loaded from the staged directory matched.
    assert result.outcome is Outcome.FAIL
    assert [(d.path, d.baseline, d.candidate) for d in result.all_differences] == [
        ("extra.hidden_module_counter", "4", "14")
    ]
    assert list(tmp_path.iterdir()) == []
