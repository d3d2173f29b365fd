"""What the framework and distributed programs of the corpus share: how an entry runs its check.

Every entry of hf_trainer, lightning, accelerate, ddp and fsdp2 runs
`check_resume` the way docs/resume.md recommends: `ExactComparison()` on the
deterministic form, `NoiseComparison()` on the nondeterministic one. The
case classes and training scripts live here, in `frameworks/`, not beside
`programs/lightning.py` and `programs/accelerate.py`: check_resume puts the
case module's own directory first on every child's PYTHONPATH, where a
`lightning.py` would hide the real library (and transformers looks for
`accelerate`). A case is named by spec
(`benchmarks.corpus.programs.frameworks.<module>:<Class>`); every phase also
gets the repository root on its PYTHONPATH, to import it.
How children start (fresh or warm) is the runner's choice: `start` is left
to `$TRAINPARITY_START`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from benchmarks.corpus import Entry

ROOT = Path(__file__).resolve().parents[4]
PROGRAMS = Path(__file__).resolve().parent
PYTHON = sys.executable

# One thread per child (the nondeterministic forms draw their rounding from a random-order
# sum, not from threads); a fixed hash seed so that warm phases share one server; the
# repository root first on the path, for the case modules and the training scripts alike.
ENVIRONMENT = {"PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    path = os.pathsep.join(part for part in (str(ROOT), os.environ.get("PYTHONPATH", "")) if part)
    return {**ENVIRONMENT, "PYTHONPATH": path, **(extra or {})}


def resume_entry(
    program: str,
    case: str,
    *,
    form: str,
    fault: str | None = None,
    expect_path: str | None = None,
    expect_step: int | None = None,
    fast: bool = False,
    note: str = "",
    timeout: float = 240.0,
    extra_environment: Mapping[str, str] | None = None,
) -> Entry:
    """An entry that runs `check_resume(case)`: exact, or `NoiseComparison()` when nondeterministic."""
    if form not in ("deterministic", "nondeterministic"):
        raise ValueError(f"form must be 'deterministic' or 'nondeterministic', not {form!r}")

    def run(work_dir: Path) -> Any:
        import trainparity

        comparison = (
            trainparity.NoiseComparison()
            if form == "nondeterministic"
            else trainparity.ExactComparison()
        )
        return trainparity.check_resume(
            case,
            comparison=comparison,
            cwd=ROOT,
            work_dir=work_dir,
            environment=environment(extra_environment),
            timeout=timeout,
        )

    return Entry(
        program=program,
        form=form,
        check="resume",
        run=run,
        fault=fault,
        expect_path=expect_path,
        expect_step=expect_step,
        fast=fast,
        note=note,
    )


def runs_entry(
    program: str,
    case: str,
    *,
    form: str,
    comparison: Callable[[], Any],
    fault: str | None = None,
    expect_path: str | None = None,
    expect_step: int | None = None,
    fast: bool = False,
    note: str = "",
    timeout: float = 240.0,
) -> Entry:
    """An entry that runs `check_runs(case)` over the case's own `variants`, under `comparison()`."""

    def run(work_dir: Path) -> Any:
        import trainparity

        return trainparity.check_runs(
            case,
            comparison=comparison(),
            cwd=ROOT,
            work_dir=work_dir,
            environment=environment(),
            timeout=timeout,
        )

    return Entry(
        program=program,
        form=form,
        check="runs",
        run=run,
        fault=fault,
        expect_path=expect_path,
        expect_step=expect_step,
        fast=fast,
        note=note,
    )


def script_command(script: str, arguments: list[str]) -> list[str]:
    """`python <programs>/<script> ...`: the interpreter running the check, the script by path."""
    return [PYTHON, str(PROGRAMS / script), *arguments]


class TwoRankDcpCase:
    """A torchrun job on 2 ranks that saves a DCP directory with the scheduler and each rank's
    RNG file beside it (ddp_train.py, fsdp2_train.py): set `script` and the steps."""

    name = "two_ranks"
    script = ""
    split_step = 2
    total_step = 4
    ranks = 2
    arguments: tuple[str, ...] = ()
    pass_total_steps = False  # the script takes --total-steps (its schedule's length)

    def command(self, plan) -> list[str]:
        from trainparity.distributed import torchrun_command

        script = [
            str(PROGRAMS / self.script),
            "--checkpoint",
            str(self.checkpoint_path(plan.run_dir)),
            "--end-step",
            str(plan.end_step),
            *(["--total-steps", str(self.total_step)] if self.pass_total_steps else []),
            *self.arguments,
        ]
        if plan.resume_from is not None:
            script += ["--resume", str(plan.resume_from)]
        return torchrun_command(script, nproc_per_node=self.ranks, log_dir=plan.run_dir / "ranks")

    def checkpoint_path(self, run_dir: Path) -> Path:
        return run_dir / "checkpoint"  # a DCP directory

    def observe_checkpoint(self, path: Path) -> Mapping[str, object]:
        import torch
        from trainparity.checkpoints import load_dcp

        state = load_dcp(path)  # model, optim, train: read from the directory, no process group
        state["scheduler"] = torch.load(path / "scheduler.pt", weights_only=False)
        state["rng"] = {
            f"rank{rank}": torch.load(path / f"rng-rank{rank}.pt", weights_only=True)
            for rank in range(self.ranks)
        }
        return state
