"""Resume quickstart: a clean case that PASSes and a faulty one that FAILs at scheduler.last_epoch.

Run `python -m trainparity.quickstarts.resume`: prints both verdicts (two
lines each; `--json`: both reports as JSON) and exits 0 when the clean case
passes and the fault is caught. The same
module is the training script the cases launch (`... resume worker ...`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

SEED = 37
CHECKPOINT_NAME = "checkpoint.pt"
# Set to 1 to call trainparity.record() after loading and after every step
# (benchmarks/bench_record.py measures what that costs a check).
RECORD_VARIABLE = "TRAINPARITY_QUICKSTART_RECORD"


def train(
    run_dir: Path, end_step: int, resume_from: Path | None = None, fault: bool = False
) -> dict[str, Any]:
    """Train a one-weight model with momentum to `end_step`, save the checkpoint, return the state."""
    # torch is imported where it is used: the check's own process loads this module for
    # the case classes only, and stays torch-free in warm mode (docs/limitations.md).
    import torch

    if resume_from is None:
        torch.manual_seed(SEED)
        state: dict[str, Any] = {
            "step": 0,
            "model": {"weight": torch.tensor([1.0])},
            "optimizer": {"momentum": torch.tensor([0.0])},
            "scheduler": {"last_epoch": 0},
        }
    else:
        state = torch.load(resume_from, map_location="cpu", weights_only=True)
        torch.set_rng_state(state["rng"]["torch_cpu"])
        if fault:
            state["scheduler"]["last_epoch"] = 0  # the intentional fault: scheduler progress lost
    record = os.environ.get(RECORD_VARIABLE) == "1"
    if record and resume_from is not None:
        _record(state)
    while state["step"] < end_step:
        draw = torch.rand(1)
        state["optimizer"]["momentum"] = 0.8 * state["optimizer"]["momentum"] + draw
        state["model"]["weight"] = state["model"]["weight"] + state["optimizer"]["momentum"]
        state["scheduler"]["last_epoch"] += 1
        state["step"] += 1
        if record:
            _record(state)
    state["rng"] = {"torch_cpu": torch.get_rng_state()}
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.save(state, run_dir / CHECKPOINT_NAME)
    return state


def _record(state: dict[str, Any]) -> None:
    import torch
    import trainparity

    observed = {key: state[key] for key in ("model", "optimizer", "scheduler")}
    trainparity.record(state["step"], {**observed, "rng": {"torch_cpu": torch.get_rng_state()}})


class CleanCase:
    """Saves and restores everything: resume parity holds."""

    name = "quickstart_resume_clean"
    split_step = 2
    total_step = 4
    fault = False

    def command(self, plan: Any) -> Sequence[str]:
        argv = [sys.executable, "-m", "trainparity.quickstarts.resume", "worker"]
        argv += ["--run-dir", str(plan.run_dir), "--end-step", str(plan.end_step)]
        if plan.resume_from is not None:
            argv += ["--resume-from", str(plan.resume_from)]
        if self.fault:
            argv.append("--fault")
        return argv

    def checkpoint_path(self, run_dir: Path) -> Path:
        return run_dir / CHECKPOINT_NAME

    def observe_checkpoint(self, path: Path) -> Mapping[str, object]:
        import torch

        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
        return {key: checkpoint[key] for key in ("model", "optimizer", "scheduler", "rng")}


class FaultyCase(CleanCase):
    """Loses the scheduler's progress on resume: FAILs at scheduler.last_epoch."""

    name = "quickstart_resume_fault"
    fault = True


def run() -> dict[str, Any]:
    """Check both cases and return the quickstart payload."""
    from trainparity import check_resume, shared_warm_servers
    from trainparity.quickstarts._payload import quickstart_payload

    # Under TRAINPARITY_START=warm (`make quickstart`) the second check forks its children
    # from the server the first one started, instead of importing torch in one of its own.
    with shared_warm_servers():
        clean = check_resume("trainparity.quickstarts.resume:CleanCase")
        faulty = check_resume("trainparity.quickstarts.resume:FaultyCase")
    return quickstart_payload(clean, faulty)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainparity.quickstarts.resume")
    parser.add_argument("--json", action="store_true", help="print both reports as JSON")
    actions = parser.add_subparsers(dest="action")
    worker = actions.add_parser("worker", help="run the quickstart training script")
    worker.add_argument("--run-dir", type=Path, required=True)
    worker.add_argument("--end-step", type=int, required=True)
    worker.add_argument("--resume-from", type=Path)
    worker.add_argument("--fault", action="store_true")
    arguments = parser.parse_args(argv)
    if arguments.action == "worker":
        train(arguments.run_dir, arguments.end_step, arguments.resume_from, arguments.fault)
        return 0
    from trainparity.quickstarts._payload import print_payload

    return print_payload(run(), as_json=arguments.json)


if __name__ == "__main__":
    sys.exit(main())
