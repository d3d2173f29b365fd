"""What users implement: resume and accumulation cases, and the small records they exchange."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "AccumulationCase",
    "LossAccounting",
    "ProcessExecutionPlan",
    "ProcessResumeCase",
    "RunsCase",
    "TrainingState",
]

RESUME_PHASES = ("baseline_a", "baseline_b", "candidate_split", "candidate_resume")


@dataclass(frozen=True)
class ProcessExecutionPlan:
    """One training child of a resume check: which phase, where, until which step, from what.

    `world_size` is the rank count this phase must run with when the check
    was given `world_sizes` (an elastic resume); None: the case's own.
    `layout` is the layout (a name the case reads: e.g. a device mesh) this
    phase must run on when the check was given `layouts`; None: the case's own.
    """

    phase: str
    cwd: Path
    run_dir: Path
    end_step: int
    resume_from: Path | None = None
    world_size: int | None = None
    layout: str | None = None


@runtime_checkable
class ProcessResumeCase(Protocol):
    """A training script wrapped for `check_resume` (docs/compatibility.md, "Surface")."""

    name: str
    split_step: int
    total_step: int

    def command(self, plan: ProcessExecutionPlan) -> Sequence[str]: ...

    def checkpoint_path(self, run_dir: Path) -> Path: ...

    def observe_checkpoint(self, path: Path) -> Mapping[str, object]: ...


@runtime_checkable
class RunsCase(Protocol):
    """A training script wrapped for `check_runs`: a resume case without the split step.

    Optional, duck-typed: `variants`, the variants checked when check_runs is given none.
    """

    name: str
    total_step: int

    def command(self, plan: ProcessExecutionPlan) -> Sequence[str]: ...

    def checkpoint_path(self, run_dir: Path) -> Path: ...

    def observe_checkpoint(self, path: Path) -> Mapping[str, object]: ...


@dataclass
class TrainingState:
    """The live objects of one training run that accumulation builds and observes."""

    model: Any
    optimizer: Any
    scheduler: Any | None = None
    step: int = 0
    scaler: object | None = None


@dataclass(frozen=True)
class LossAccounting:
    """A microbatch loss; with numerator and denominator the global normalisation is explicit."""

    value: Any
    numerator: Any | None = None
    denominator: int | float | None = None


@runtime_checkable
class AccumulationCase(Protocol):
    """A model, optimizer and batch wrapped for `check_accumulation` (docs/compatibility.md, "Surface")."""

    equivalence: str

    def build(self, seed: int, device: str) -> TrainingState: ...

    def batch(self, device: str) -> object: ...

    def loss(self, state: TrainingState, batch: object) -> LossAccounting: ...
