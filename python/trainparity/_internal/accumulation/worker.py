"""The accumulation worker: a fresh process that runs one plan for one optimizer-update boundary.

Launched by check_accumulation as `python -m trainparity._internal.accumulation.worker
--case SPEC --plan JSON --device D --seed N --result FILE --observations FILE`.
It runs one child of check_accumulation step by step (docs/compatibility.md, "check_accumulation"): seed, build, capture the initial state,
split the batch, compute every microbatch loss, account for them, backward
(and whatever the plan says per microbatch), then observe the five phases.
With `--own-step` the case's own `train_step` replaces the plan's loop and is
observed from outside (accumulation_user_step). All observations go into one
snapshot file (top-level keys `initial` and the phase names); a small JSON
result says PASS, ABSTAIN or ERROR. The exit status is 0 whenever the result
was written.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import traceback
from pathlib import Path
from typing import Any

import torch

from trainparity._internal.accumulation.boundary import (
    Boundary,
    CaseMethodError,
    OwnStepBoundary,
    RankBoundary,
    Stop,
    call_case,
)
from trainparity._internal.accumulation.plan import AccumulationExecutionPlan, UnsafeBatchSplit
from trainparity._internal.accumulation.ranks import RankContext, release_left_groups
from trainparity._internal.accumulation.user_step import check_own_step_plan, has_train_step
from trainparity._internal.cases.loading import CaseImportError, load_accumulation_case
from trainparity._internal.error_text import error_text
from trainparity._internal.outcomes import Outcome
from trainparity._internal.processes.observer.snapshot_service import write_result
from trainparity._internal.processes.worker_exit import exit_worker
from trainparity._internal.protocols import TrainingState

__all__ = ["execute", "main", "seed_everything"]


def seed_everything(seed: int, device: str) -> None:
    """Seed Python, torch (and every CUDA device for a CUDA run) and numpy's global generator."""
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy
    except ImportError:
        numpy = None
    if numpy is not None:
        numpy.random.seed(seed)
    if device.startswith("cuda"):
        torch.cuda.manual_seed_all(seed)


def execute(
    case_spec: str,
    plan_text: str,
    device: str,
    seed: int,
    observations_path: Path,
    *,
    own_step: bool = False,
) -> dict[str, Any]:
    """Run one plan, or with `own_step` the case's train_step, and return the result record.

    The record is the accumulation child result (docs/compatibility.md, "check_accumulation"); a PASS of an own
    step that returned no losses adds `unobserved_phases: ["loss_accounting"]`.
    """
    record: dict[str, Any] = {"pid": os.getpid()}
    where = ""  # which child ran the user's step, for its messages
    try:
        plan = AccumulationExecutionPlan.from_dict(json.loads(plan_text))
        if own_step:  # only the candidate runs the user's own step; a rank says which one it is
            rank = f".rank{os.environ.get('RANK', '?')}" if plan.world_size > 1 else ""
            where = f" in candidate{rank}"
        seed_everything(seed, device)
        case = _load(case_spec)
        if isinstance(case.equivalence, str):
            record["equivalence"] = case.equivalence
        counting = has_train_step(case)
        if own_step and not counting:
            raise TypeError("--own-step needs a case with a callable train_step")
        if own_step:
            check_own_step_plan(plan)
        # A rank joins its process group before build: a case may build its own DDP model.
        context = RankContext(device) if plan.world_size > 1 else None
        if context is not None:
            device = context.device
        state = call_case(case, "build", seed, device)
        _check_state(state)
        if context is not None:
            boundary: Boundary = RankBoundary(
                case, plan, state, count_steps=counting, own_step=own_step, context=context
            )
        else:
            boundary = (OwnStepBoundary if own_step else Boundary)(
                case, plan, state, count_steps=counting
            )
        boundary.where = where
        boundary.run(device)
        boundary.write(observations_path)
    except Stop as stop:
        record.update(outcome=stop.outcome.value, message=stop.message)
        return record
    except UnsafeBatchSplit as error:
        record.update(outcome=Outcome.ABSTAIN.value, message=str(error))
        return record
    except CaseMethodError as failure:
        traceback.print_exception(failure.error)
        error = failure.error
        record.update(
            outcome=Outcome.ERROR.value,
            message=f"worker failed: {error_text(error)} (raised by case.{failure.method}(){where})",
        )
        return record
    except Exception as error:
        traceback.print_exc()
        record.update(outcome=Outcome.ERROR.value, message=f"worker failed: {error_text(error)}")
        return record
    record.update(
        outcome=Outcome.PASS.value,
        message="boundary observed",
        loss_normalization_captured=boundary.loss_normalization_captured,
        random_draws=boundary.random_draws,
    )
    if boundary.unobserved:
        record["unobserved_phases"] = list(boundary.unobserved)
    return record


def _load(case_spec: str) -> Any:
    try:
        return load_accumulation_case(case_spec)
    except CaseImportError as error:
        raise CaseImportError(
            f"{error} (the worker runs in {os.getcwd()}; pass cwd= or "
            "environment={'PYTHONPATH': ...} so that the case is importable there)"
        ) from error


def _check_state(state: object) -> None:
    if not isinstance(state, TrainingState):
        raise TypeError(
            f"case.build() must return a trainparity TrainingState, got {type(state).__name__}"
        )
    if not isinstance(state.model, torch.nn.Module):
        raise TypeError(
            f"TrainingState.model must be a torch.nn.Module, got {type(state.model).__name__}"
        )
    if not isinstance(state.optimizer, torch.optim.Optimizer):
        raise TypeError(
            "TrainingState.optimizer must be a torch.optim.Optimizer, "
            f"got {type(state.optimizer).__name__}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainparity._internal.accumulation.worker", description=__doc__
    )
    parser.add_argument("--case", required=True)
    parser.add_argument("--plan", required=True, help="JSON of AccumulationExecutionPlan.to_dict()")
    parser.add_argument("--device", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--result", type=Path, required=True)
    parser.add_argument("--observations", type=Path, required=True)
    parser.add_argument(
        "--own-step", action="store_true", help="call the case's train_step instead of the plan"
    )
    arguments = parser.parse_args(argv)
    record = execute(
        arguments.case,
        arguments.plan,
        arguments.device,
        arguments.seed,
        arguments.observations,
        own_step=arguments.own_step,
    )
    write_result(str(arguments.result), record)  # atomically: never half a file
    release_left_groups()  # execute's models are gone: the group is freed last, without the GIL
    return 0


if __name__ == "__main__":
    exit_worker(main())
