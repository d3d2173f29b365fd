"""explain(result): why two runs of a check part, by rerunning them — the first op, and leads tested one knob at a time.

From a check_resume or check_runs result whose processes called record():

1. **The first op.** The two phases that part are rerun up to the first
   divergent step N, each with TRAINPARITY_TRACE_STEP=N, so record(N-1) and
   record(N) bracket a trace of step N in each, with no change to the
   script; `diff_traces` then names the first op where they part, born or
   inherited. A resumed phase is rerun from a fresh candidate_split's
   checkpoint, as the check ran it.
2. **The leads.** Each settable knob (forensics/knobs.py) whose value
   differs between the two sides' environments is set on one side to the
   other's value, and that side rerun to step N: `confirmed` when its
   recording then equals the other side's bit for bit up to N, `partial`
   when the first divergent step moves later or the distance at N shrinks
   more than 10×, `ruled out` otherwise. When both sides share one
   environment (two repeats part: an ABSTAIN), the standard determinism
   knobs are pinned on both. Fingerprint facts no variable sets (hardware,
   versions, a GPU) are `not testable here`.

Reruns stop at step N, run concurrently where the check would, and live in
one managed directory removed at the end, as a check's.
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

from trainparity._internal.cases.case_argument import CaseArgument, children_case_spec
from trainparity._internal.cases.command_case import resolved_case
from trainparity._internal.cases.loading import load_process_case, load_runs_case
from trainparity._internal.comparison.policies import ExactComparison
from trainparity._internal.forensics.variables import (
    TRACE_CAPTURE_VARIABLE,
    TRACE_OUTPUT_VARIABLE,
    TRACE_STEP_VARIABLE,
)
from trainparity._internal.outcomes import Outcome
from trainparity._internal.processes.check_runner import CheckRunner, RunSettings
from trainparity._internal.processes.child_environment import child_environment
from trainparity._internal.processes.children import PhaseChildren, PhaseError, TrainingPhase
from trainparity._internal.recording.phase_recordings import (
    recording_directory,
    recording_environment,
)
from trainparity._internal.recording.reader import read_recordings
from trainparity._internal.recording.trajectory import compare_records
from trainparity._internal.reports.reported import ReportedResult
from trainparity._internal.why.knobs import DETERMINISM_KNOBS, Knob, differing_knobs

__all__ = ["Explanation", "LeadTrial", "explain", "explained_result", "parting", "status_of"]

_RNG_OPS = ("bernoulli", "dropout", "rand", "normal", "uniform", "multinomial", "randperm")


@dataclass(frozen=True)
class LeadTrial:
    """One lead and what its rerun showed."""

    knob: str
    a: str
    b: str
    status: str  # "confirmed", "partial", "ruled out", "not testable here", "not tested"
    evidence: str
    rerun: str = ""  # which side was rerun with which values ("one_a with OMP_NUM_THREADS=2")


@dataclass(frozen=True, repr=False)
class Explanation(ReportedResult):
    """Why two runs of a check part: the first op of the first divergent step, and the leads tested.

    `outcome` is PASS when a lead is confirmed (or the first op is an
    unseeded random draw), ABSTAIN when nothing explains the divergence,
    ERROR when the reruns could not run.
    """

    outcome: Outcome
    message: str
    case: str
    step: int | None = None
    rank: int = 0  # the rank whose records part first (each rank traces its own step)
    sides: tuple[str, ...] = ()
    first_op: dict[str, Any] | None = None
    trace_message: str | None = None
    leads: tuple[LeadTrial, ...] = ()
    reruns: int = 0
    timing_seconds: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class _Side:
    """One side of the divergence as a phase to rerun: its args, environment and resume."""

    label: str
    extra_args: tuple[str, ...] = ()
    extra_env: Mapping[str, str] = field(default_factory=dict)
    resumes_from_split: bool = False


def explain(
    result: Any,
    *,
    case: CaseArgument | None = None,
    variants: Mapping[str, Any] | None = None,
    cwd: Path | None = None,
    environment: Mapping[str, str] | None = None,
    timeout: float = 300.0,
    temporary_root: Path | None = None,
    progress: bool | None = None,
    start: str | None = None,
    max_reruns: int = 8,
) -> Explanation:
    """Rerun the two runs of `result` that part, to say which op parts them and which knob explains it.

    `result` is a check_resume or check_runs result whose processes called
    record() (the first divergent step must be known). `case` defaults to
    the result's case spec; a CommandCase, or a class that went by value,
    must be given again. `variants`
    (check_runs) defaults to the case's `variants`. `max_reruns` bounds the
    knob reruns (the traced reruns of the two sides are not counted).
    """
    if isinstance(max_reruns, bool) or not isinstance(max_reruns, int) or max_reruns < 0:
        raise ValueError(f"max_reruns must be an int >= 0, got {max_reruns!r}")
    divergence = (_field(result, "trajectory") or {}).get("first_divergence")
    if divergence is None:
        raise ValueError(
            "explain needs the step at which the runs part: the check's processes must call "
            "trainparity.record() after every step (docs/trajectories.md), and the result must "
            "be a FAIL or ABSTAIN that names a recorded step"
        )
    runner = _ExplainRunner(
        timeout=timeout, temporary_root=temporary_root, progress=progress, start=start
    )
    return runner.explain(
        result,
        divergence,
        case=case,
        variants=variants,
        cwd=cwd,
        environment=environment,
        max_reruns=max_reruns,
    )


def explained_result(result: Any, **options: Any) -> Any:
    """`result` with its `explanation` (explain=True on a check), or unchanged where none applies.

    Only a FAIL or ABSTAIN that names a recorded step is explained; its report
    keeps `explanation` (the Explanation's report), and an explanation that
    could not run says why there.
    """
    if result.outcome not in (Outcome.FAIL, Outcome.ABSTAIN):
        return result
    if not (_field(result, "trajectory") or {}).get("first_divergence"):
        return result
    import dataclasses

    explanation = explain(result, **options)
    return dataclasses.replace(result, explanation=explanation.to_dict())


class _ExplainRunner(CheckRunner):
    def explain(
        self,
        result: Any,
        divergence: Mapping[str, Any],
        *,
        case: CaseArgument | None,
        variants: Mapping[str, Any] | None,
        cwd: Path | None,
        environment: Mapping[str, str] | None,
        max_reruns: int,
    ) -> Explanation:
        began = time.perf_counter()
        spec = case if case is not None else _field(result, "case")
        runs = _field(result, "variant_comparisons") is not None
        loaded, module_spec = resolved_case(spec, load_runs_case if runs else load_process_case)
        step = int(divergence["step"])
        chain = _field(result, "resume_chain") or ()
        if chain:  # None (absent) exactly for one split at the case's own rank count
            # The reruns rebuild one split; a chain's later links (or another rank count)
            # would be rerun as something the check did not run, and explained wrongly.
            return Explanation(
                Outcome.ERROR,
                "explain reruns a resume with one split at the case's rank count; this check "
                "ran a chain of resumes (or an elastic one), which it does not rerun yet",
                case=str(_field(result, "case")),
                step=step,
            )
        restored_at = None
        if divergence.get("round_trip"):
            # The state right after loading already differs: nothing of a step made it. Step
            # N+1 is traced instead, to show the first op that what was restored changes.
            restored_at = step
            total = getattr(loaded, "total_step", step)
            if step >= total:
                return Explanation(
                    Outcome.PASS,
                    f"the resumed process's first record, taken right after loading, already "
                    f"differs at step {step}: the divergence is in what the checkpoint restored "
                    "(no op of a training step made it); see the check's differences",
                    trace_message="the round trip: nothing to trace",
                    case=str(_field(result, "case")),
                    step=step,
                    sides=(divergence["baseline_phase"], divergence["candidate_phase"]),
                )
            step += 1
        sides = _sides(result, divergence, loaded, variants, runs)
        command_dir = Path(cwd).resolve() if cwd is not None else Path.cwd().resolve()
        with self.run_settings(
            work_dir=None,
            prefix="trainparity-explain-",
            command_dir=command_dir,
            environment=child_environment(module_spec, environment),
            device=getattr(loaded, "device", "cpu"),
            concurrent_children=2,
        ) as settings:
            reruns = _Reruns(
                loaded,
                children_case_spec(spec, settings.run_root),
                settings,
                step,
                getattr(loaded, "split_step", 0),
            )
            try:
                return _explained(
                    result,
                    sides,
                    reruns,
                    step,
                    max_reruns,
                    began,
                    repeats=_field(result, "outcome") in (Outcome.ABSTAIN, "ABSTAIN"),
                    restored_at=restored_at,
                    rank=int(divergence.get("rank") or 0),
                )
            except PhaseError as failure:
                return Explanation(
                    Outcome.ERROR,
                    f"a rerun failed: {failure.message}",
                    case=str(_field(result, "case")),
                    step=step,
                    sides=tuple(side.label for side in sides),
                    reruns=reruns.count,
                )


def _sides(
    result: Any, divergence: Mapping[str, Any], case: Any, variants: Any, runs: bool
) -> tuple[_Side, _Side]:
    names = (divergence["baseline_phase"], divergence["candidate_phase"])
    if not runs:
        return tuple(  # type: ignore[return-value]
            _Side(
                name,
                resumes_from_split=name not in ("candidate_split",)
                and not name.startswith("baseline"),
            )
            for name in names
        )
    declared = variants if variants is not None else getattr(case, "variants", None) or {}
    found = []
    for name in names:
        variant = declared.get(name.rsplit("_", 1)[0], {})
        args = variant.get("args", ()) if isinstance(variant, Mapping) else variant.args
        env = variant.get("env", {}) if isinstance(variant, Mapping) else variant.env
        found.append(_Side(name, tuple(args), dict(env)))
    return found[0], found[1]


class _Reruns:
    """The reruns of one explanation, each in its own directory under the managed run root."""

    def __init__(
        self, case: Any, spec: str, settings: RunSettings, step: int, split_step: int
    ) -> None:
        self.case, self.spec, self.settings = case, spec, settings
        self.step, self.split_step = step, split_step
        self.count = 0
        self.timings: dict[str, float] = {}

    def run(self, batch: Sequence[tuple[str, _Side, Mapping[str, str], bool]]) -> dict[str, Path]:
        """Rerun each (name, side, knob environment, traced) to step N; their recording directories."""
        root = self.settings.run_root
        phases: dict[str, TrainingPhase] = {}
        for name, side, knob_env, traced in batch:
            env = {**side.extra_env, **knob_env, **recording_environment(root, name)}
            if traced:
                env[TRACE_STEP_VARIABLE] = str(self.step)
                env[TRACE_OUTPUT_VARIABLE] = str(root / name / "step.trace")
                # The plain dispatch-mode capture: DebugMode's first trace imports torch's
                # inductor lowering, about a second of a rerun that trains a few steps.
                env[TRACE_CAPTURE_VARIABLE] = "TorchDispatchMode"
            if side.resumes_from_split:
                split_env = {**side.extra_env, **knob_env}
                phases[f"{name}-split"] = TrainingPhase(
                    f"{name}-split", self.split_step, root / f"{name}-split", extra_env=split_env
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
                    children.phases[name].resume_from = self._staged(children, name, checkpoint)
                    if self.settings.parallel:
                        children.start(name)
            for name in phases:
                children.trained(name)
        self.count += len(batch)
        return {name: recording_directory(root, name) for name, _, _, _ in batch}

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


def _explained(
    result: Any,
    sides: tuple[_Side, _Side],
    reruns: _Reruns,
    step: int,
    max_reruns: int,
    began: float,
    *,
    repeats: bool,
    restored_at: int | None,
    rank: int = 0,
) -> Explanation:
    """Trace step N on both sides, then test the leads; `repeats`: the sides are two runs of
    one configuration (an ABSTAIN), so the determinism knobs are pinned on both."""
    a, b = sides
    # Step 0 is the state before any training step: nothing to trace, the knobs still apply.
    traceable = step > 0
    traced = reruns.run([("a", a, {}, traceable), ("b", b, {}, traceable)])
    root = reruns.settings.run_root
    traces = [_trace_of(root / name, rank) for name in ("a", "b")]
    first_op, trace_message = None, None
    if not traceable:
        trace_message = (
            "the runs part at step 0, before any training step: in what built, seeded or "
            "loaded the initial state (no op of a step to trace)"
        )
    elif all(path.exists() for path in traces):
        # Reading traces needs torch; the check's own process imports none until here.
        from trainparity._internal.forensics.trace_diff import diff_traces

        diff = diff_traces(*traces)
        first_op = _op_fields(diff.first_divergence)
        trace_message = diff.message
    else:
        trace_message = f"no trace of step {step} was written (does the script call record() at step {step - 1} and {step}?)"
    original = parting(traced["a"], traced["b"])
    environments = [{**reruns.settings.environment, **side.extra_env} for side in sides]
    trials: list[LeadTrial] = []
    knobs = differing_knobs(*environments)
    budget = max_reruns
    if knobs:
        tested = knobs[:budget]
        budget -= len(tested)
        # Every single knob at once: the reruns are independent and run side by side.
        trials.extend(_trials(reruns, sides, tested, traced, original))
        trials.extend(
            LeadTrial(knob.name, _text(left), _text(right), "not tested", "--max-reruns reached")
            for knob, left, right in knobs[len(tested) :]
        )
        # No single knob explains it: pairs, until one does (the smallest set that does).
        if not any(trial.status == "confirmed" for trial in trials):
            for first, second in combinations(knobs, 2):
                if budget <= 0:
                    break
                budget -= 1
                pair = Knob(f"{first[0].name} + {second[0].name}", ())
                (trial,) = _trials(
                    reruns,
                    sides,
                    [(pair, {**first[1], **second[1]}, {**first[2], **second[2]})],
                    traced,
                    original,
                )
                trials.append(trial)
                if trial.status == "confirmed":
                    break
    elif original is not None and repeats:
        pinned = []
        for knob, values in DETERMINISM_KNOBS:
            if knob.gpu_only and getattr(reruns.case, "device", "cpu") == "cpu":
                trials.append(
                    LeadTrial(
                        knob.name,
                        "unset",
                        _text(values),
                        "not testable here",
                        "a GPU knob on a CPU run",
                    )
                )
            elif budget > 0:
                budget -= 1
                pinned.append((knob, values))
        trials[:0] = _pinned_trials(reruns, sides, pinned, original)
    confirmed = [trial for trial in trials if trial.status == "confirmed"]
    rng_op = first_op is not None and any(word in first_op.get("op", "") for word in _RNG_OPS)
    sentence = _sentence(confirmed, trials, first_op, rng_op, bool(knobs), original, repeats)
    if rank:
        sentence += f" (rank {rank}, whose records part first)"
    # Two runs of one environment that are not repeats (a resume, a variant's own arguments)
    # are explained by the op where they part.
    own_difference = not knobs and not repeats and first_op is not None
    outcome = Outcome.PASS if confirmed or rng_op or own_difference else Outcome.ABSTAIN
    if restored_at is not None:
        sentence = (
            f"right after loading, the resumed run already differs at step {restored_at}: the "
            f"divergence is in what the checkpoint restored; {sentence}"
        )
    return Explanation(
        outcome,
        sentence,
        case=str(_field(result, "case")),
        step=step,
        rank=rank,
        sides=(a.label, b.label),
        first_op=first_op,
        trace_message=trace_message,
        leads=tuple(trials),
        reruns=reruns.count,
        timing_seconds={
            **{f"rerun_{name}": seconds for name, seconds in sorted(reruns.timings.items())},
            "total_wall": time.perf_counter() - began,
        },
    )


def _trials(
    reruns: _Reruns,
    sides: tuple[_Side, _Side],
    knobs: Sequence[tuple[Knob, dict[str, str | None], dict[str, str | None]]],
    traced: dict[str, Path],
    original: tuple[int, float] | None,
) -> list[LeadTrial]:
    """Each knob tested by one rerun of a side at the other side's values, all in one batch."""
    a, b = sides
    planned: list[tuple[int, str, _Side, dict[str, str], Path, _Side]] = []
    found: list[LeadTrial | None] = []
    for index, (knob, left, right) in enumerate(knobs):
        set_left = {name: value for name, value in left.items() if value is not None}
        set_right = {name: value for name, value in right.items() if value is not None}
        if set(set_right) <= set(set_left):  # B's variables can all be set to A's values
            rerun_side, values, target, other = b, set_left, traced["a"], a
        elif set(set_left) <= set(set_right):
            rerun_side, values, target, other = a, set_right, traced["b"], b
        else:
            found.append(
                LeadTrial(
                    knob.name,
                    _text(left),
                    _text(right),
                    "not testable here",
                    "each side sets a variable of it the other leaves unset",
                )
            )
            continue
        name = "knob-" + "".join(c if c.isalnum() or c in "_-" else "-" for c in knob.name)
        planned.append((index, name, rerun_side, values, target, other))  # type: ignore[arg-type]
        found.append(None)
    ran = (
        reruns.run([(name, side, values, False) for _, name, side, values, _, _ in planned])
        if planned
        else {}
    )
    for index, name, side, values, target, other in planned:
        knob, left, right = knobs[index]
        status, evidence = status_of(parting(ran[name], target), original)
        described = f"{side.label} with {_text(values)}"
        found[index] = LeadTrial(
            knob.name,
            _text(left),
            _text(right),
            status,
            f"{described} against {other.label}: {evidence}",
            described,
        )
    return [trial for trial in found if trial is not None]


def _pinned_trials(
    reruns: _Reruns,
    sides: tuple[_Side, _Side],
    pinned: Sequence[tuple[Knob, Mapping[str, str]]],
    original: tuple[int, float],
) -> list[LeadTrial]:
    """Both sides rerun with each determinism knob pinned, every pair in one batch: agree then?"""
    batch = []
    for knob, values in pinned:
        batch += [(f"pin-{knob.name}-a", sides[0], values, False)]
        batch += [(f"pin-{knob.name}-b", sides[1], values, False)]
    ran = reruns.run(batch) if batch else {}
    trials = []
    for knob, values in pinned:
        found = parting(ran[f"pin-{knob.name}-a"], ran[f"pin-{knob.name}-b"])
        status, evidence = status_of(found, original)
        shown = _text(dict(values))
        trials.append(
            LeadTrial(knob.name, shown, shown, status, f"both sides with {shown}: {evidence}")
        )
    return trials


def parting(first: Path, second: Path) -> tuple[int, float] | None:
    """(first step whose records differ, largest relative distance there) of two recordings; None when equal.

    Records are paired by the step they claim, over the steps both recorded:
    a resumed side starts at its split step.
    """
    left, right = read_recordings(first), read_recordings(second)
    exact = ExactComparison()
    found: list[tuple[int, float]] = []
    for rank in sorted(set(left) | set(right)):
        if rank not in left or rank not in right:
            return (0, math.inf)
        theirs = {record.step: record for record in right[rank].steps}
        for record in left[rank].steps:
            other = theirs.get(record.step)
            if other is None:
                continue
            compared = compare_records(exact, record, other)
            if compared.differences:
                distance = max(compared.relative_rms_errors.values(), default=math.inf)
                found.append((record.step, distance))
                break
    return min(found) if found else None


def status_of(
    found: tuple[int, float] | None, original: tuple[int, float] | None
) -> tuple[str, str]:
    if found is None:
        return "confirmed", "equal bit for bit at every compared step"
    step, distance = found
    evidence = f"still part at step {step} (relative distance {distance:.3g})"
    if original is not None:
        if step > original[0] or (original[1] > 0 and distance * 10 < original[1]):
            return "partial", evidence + f"; originally at step {original[0]} ({original[1]:.3g})"
    return "ruled out", evidence


def _sentence(
    confirmed: list[LeadTrial],
    trials: list[LeadTrial],
    first_op: dict[str, Any] | None,
    rng_op: bool,
    had_knobs: bool,
    original: tuple[int, float] | None,
    repeats: bool,
) -> str:
    where = ""
    if first_op is not None:
        where = f"; the first op where they part is {first_op['op']} in {first_op.get('module') or 'the script'} ({first_op.get('origin')})"
    if original is None:
        return "the reruns did not part: the divergence did not reproduce here" + where
    if confirmed:
        trial = confirmed[0]
        if had_knobs:
            return (
                f"the divergence is explained by {trial.knob}: {trial.rerun} reproduces the "
                "other run bit for bit on this machine" + where
            )
        return f"the repeats agree when {trial.a} is pinned (confirmed)" + where
    who = "the two sides" if had_knobs else "the repeats"
    if not repeats and not had_knobs:
        if rng_op:
            return (
                "the two runs share one environment; the first differing op draws random "
                "numbers: the generator's state differs between them (one that a resume does "
                "not restore)" + where
            )
        return (
            "the two runs share one environment, so their difference is their own (the resume, "
            "or the variant's arguments)" + where
        )
    if rng_op:
        return (
            f"no knob makes {who} agree; the first differing op draws random numbers: an RNG "
            "that is not seeded" + where
        )
    if not trials:
        return "no settable knob differs between the two sides; the leads stay leads" + where
    if not had_knobs:
        return "no knob makes the repeats agree" + where
    return "no knob tested here explains the divergence; the leads stay leads" + where


def _trace_of(directory: Path, rank: int) -> Path:
    """The trace of step N in a rerun's directory: a multi-rank phase writes one per rank
    (`step.rank<R>.trace`, forensics/step_trace.py); the divergence's rank is read."""
    per_rank = directory / f"step.rank{rank}.trace"
    return per_rank if per_rank.exists() else directory / "step.trace"


def _field(result: Any, name: str) -> Any:
    """A result's field, or a machine report's key (`trainparity explain REPORT.json`)."""
    if isinstance(result, Mapping):
        return result.get(name)
    return getattr(result, name, None)


def _op_fields(divergence: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if divergence is None:
        return None
    keep = (
        "op",
        "module",
        "phase",
        "call",
        "origin",
        "op_kind",
        "inherited_from",
        "born_in",
        "relative_error",
    )
    return {key: divergence[key] for key in keep if key in divergence}


def _text(values: Mapping[str, str | None]) -> str:
    shown = [f"{name}={value}" for name, value in values.items() if value is not None]
    return " ".join(shown) if shown else "unset"
