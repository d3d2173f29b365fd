"""The reruns of one explanation: each side rerun to the first divergent step, traced or with a knob set.

Every rerun lives in its own directory under the explanation's managed run
root; a resumed side first reruns its split, then resumes from a copy of
that checkpoint, as the check ran it.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainparity._internal.cases.command_case import resumes_by_itself
from trainparity._internal.processes.check_runner import RunSettings
from trainparity._internal.processes.children import PhaseChildren, TrainingPhase
from trainparity._internal.recording.phase_recordings import (
    recording_directory,
    recording_environment,
)
from trainparity._internal.why.forensics.variables import (
    TRACE_CAPTURE_VARIABLE,
    TRACE_OUTPUT_VARIABLE,
    TRACE_STEP_VARIABLE,
)
from trainparity._internal.why.knob_check import recorded_fingerprints

__all__ = ["Reruns", "Side", "trace_of"]

# The plain dispatch-mode capture: DebugMode's first trace imports torch's inductor
# lowering, about a second of a rerun that trains a few steps.
_RERUN_CAPTURE = "TorchDispatchMode"


def trace_of(directory: Path, rank: int) -> Path:
    """The trace of step N in a rerun's directory: a multi-rank phase writes one per rank
    (`step.rank<R>.trace`, forensics/step_trace.py); the divergence's rank is read."""
    per_rank = directory / f"step.rank{rank}.trace"
    return per_rank if per_rank.exists() else directory / "step.trace"


@dataclass(frozen=True)
class Side:
    """One side of the divergence as a phase to rerun: its args, environment and resume."""

    label: str
    extra_args: tuple[str, ...] = ()
    extra_env: Mapping[str, str] = field(default_factory=dict)
    resumes_from_split: bool = False


class Reruns:
    """The reruns of one explanation, each in its own directory under the managed run root."""

    def __init__(
        self, case: Any, spec: str, settings: RunSettings, step: int, split_step: int
    ) -> None:
        self.case, self.spec, self.settings = case, spec, settings
        self.step, self.split_step = step, split_step
        self.count = 0
        self.timings: dict[str, float] = {}

    def run(self, batch: Sequence[tuple[str, Side, Mapping[str, str], bool]]) -> dict[str, Path]:
        """Rerun each (name, side, knob environment, traced) to step N; their recording directories."""
        root = self.settings.run_root
        phases: dict[str, TrainingPhase] = {}
        for name, side, knob_env, traced in batch:
            env = {**side.extra_env, **knob_env, **recording_environment(root, name)}
            if traced:
                env[TRACE_STEP_VARIABLE] = str(self.step)
                env[TRACE_OUTPUT_VARIABLE] = str(root / name / "step.trace")
                env[TRACE_CAPTURE_VARIABLE] = _RERUN_CAPTURE
            if side.resumes_from_split:
                # Recorded too: its fingerprint shows whether a knob took in the split's process.
                split = f"{name}-split"
                split_env = {**side.extra_env, **knob_env, **recording_environment(root, split)}
                phases[split] = TrainingPhase(
                    split,
                    self.split_step,
                    root / split,
                    extra_env=split_env,
                    emptied=(recording_directory(root, split),),
                )
            phases[name] = TrainingPhase(
                name,
                self.step,
                root / name,
                extra_args=side.extra_args,
                extra_env=env,
                emptied=(recording_directory(root, name),),
            )
        children = PhaseChildren(
            case_spec=self.spec,
            case=self.case,
            settings=self.settings,
            phases=phases,
            timings=self.timings,
            case_kind="resume",
        )
        with children.running():
            first = [name for name in phases if not _needs_split(phases, name)]
            if self.settings.parallel:
                for name in first:
                    children.start(name)
            for name, side, _, _ in batch:
                if side.resumes_from_split:
                    checkpoint = children.trained(f"{name}-split")
                    staged = self._staged(children, name, checkpoint)
                    # As the check ran it: a job that resumes by itself finds it there.
                    resumed = None if resumes_by_itself(self.case) else staged
                    children.phases[name].resume_from = resumed
                    if self.settings.parallel:
                        children.start(name)
            for name in phases:
                children.trained(name)
        self.count += len(batch)
        return {name: recording_directory(root, name) for name, _, _, _ in batch}

    def fingerprints(self, *names: str) -> list[tuple[str, Mapping[str, Any]]]:
        """The fingerprints recorded by reruns `names` and their splits, every rank."""
        root = self.settings.run_root
        directories = []
        for name in names:
            directories += [
                recording_directory(root, f"{name}-split"),
                recording_directory(root, name),
            ]
        return recorded_fingerprints(directories)

    def _staged(self, children: PhaseChildren, name: str, checkpoint: Path) -> Path:
        resume_dir = self.settings.run_root / name
        resume_dir.mkdir(parents=True, exist_ok=True)
        staged = children.checkpoint_path(name, resume_dir, "before child launch")
        staged.parent.mkdir(parents=True, exist_ok=True)
        if checkpoint.is_dir():
            shutil.copytree(checkpoint, staged, dirs_exist_ok=True)
        else:
            shutil.copy2(checkpoint, staged)
        return staged


def _needs_split(phases: Mapping[str, TrainingPhase], name: str) -> bool:
    return f"{name}-split" in phases
