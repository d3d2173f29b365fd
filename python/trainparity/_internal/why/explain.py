"""explain(result): why two runs of a check part, by rerunning them — the first op, and leads tested one knob at a time.

From a check_resume or check_runs result whose processes called record():

1. **The first op.** The two phases that part are rerun up to the first
   divergent step N, each with TRAINPARITY_TRACE_STEP=N, so record(N-1) and
   record(N) bracket a trace of step N in each, with no change to the
   script; `diff_traces` then names the first op where they part, born or
   inherited. A resumed phase is rerun from a fresh candidate_split's
   checkpoint, as the check ran it.
2. **The leads.** Each settable knob (knobs.py) whose value
   differs between the two sides' environments is set on one side to the
   other's value, and that side rerun to step N: `confirmed` when its
   recording then equals the other side's bit for bit up to N, `partial`
   when the first divergent step moves later or the distance at N shrinks
   more than 10×, `ruled out` otherwise, but only where the fingerprints the
   reruns recorded show the knob took (knob_check.py): a script that sets
   it in code makes it `not controllable from outside`, and one no
   fingerprint keeps is `no effect seen`. When both sides share one
   environment (two repeats part: an ABSTAIN), the standard determinism
   knobs are pinned on both (GPU knobs only on a run that could use a GPU).
   Fingerprint facts no variable sets (hardware, versions, a GPU) are
   `not testable here`.

Reruns stop at step N, run concurrently where the check would, and live in
one managed directory removed at the end, as a check's.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainparity._internal.cases.command_case import (
    CaseArgument,
    CommandCase,
    children_case_spec,
    resolved_case,
)
from trainparity._internal.cases.loading import load_process_case, load_runs_case
from trainparity._internal.outcomes import Outcome
from trainparity._internal.processes.check_runner import CheckRunner
from trainparity._internal.processes.child_environment import child_environment
from trainparity._internal.processes.children import PhaseError
from trainparity._internal.why.environment_leads import ran_on_gpu
from trainparity._internal.why.explanation import Explanation, LeadTrial, explanation_sentence
from trainparity._internal.why.knob_check import thread_counts
from trainparity._internal.why.knobs import differing_knobs
from trainparity._internal.why.lead_trials import NOT_CONTROLLABLE, tested_leads
from trainparity._internal.why.parting import parting
from trainparity._internal.why.reruns import Reruns, Side, trace_of

__all__ = ["explain", "explained_result"]

_RNG_OPS = ("bernoulli", "dropout", "rand", "normal", "uniform", "multinomial", "randperm")


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
    the case the check was given (a spec, a class, even one sent by value, or
    a CommandCase); from a JSON report, to its `command_case` or its `case`
    spec (a class sent by value must then be given again). `variants`
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
        spec = case if case is not None else _checked_case(result)
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
                    f"differs at step {step}: the divergence is in what the checkpoint restored"
                    f"{_restored_words(result)} (no op of a training step made it); see the "
                    "check's differences",
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
            reruns = Reruns(
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
) -> tuple[Side, Side]:
    names = (divergence["baseline_phase"], divergence["candidate_phase"])
    if not runs:
        return tuple(  # type: ignore[return-value]
            Side(
                name,
                resumes_from_split=name not in ("candidate_split",)
                and not name.startswith("baseline"),
            )
            for name in names
        )
    declared = _variants_run(result, case, variants)
    found = []
    for name in names:
        variant = declared.get(name.rsplit("_", 1)[0], {})
        args = _variant_part(variant, "args") or ()
        env = _variant_part(variant, "env") or {}
        found.append(Side(name, tuple(args), dict(env)))
    return found[0], found[1]


def _variants_run(result: Any, case: Any, variants: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The variants the check ran: given, kept by the result, else rebuilt from a report.

    A report keeps each variant's arguments (`variant_args`) and the names of
    its environment variables, not their values: those come from the case's
    own variant of that name, and where it has other names the runs cannot be
    rebuilt from the report (ValueError).
    """
    if variants is not None:
        return variants
    kept = _field(result, "declared_variants")
    if kept is not None:
        return kept
    own = getattr(case, "variants", None) or {}
    args = _field(result, "variant_args")
    if args is None:  # a report from before variant_args: the case's own variants
        return own
    names = _field(result, "variant_environment_keys") or {}
    rebuilt = {}
    for name, arguments in args.items():
        environment = _variant_part(own.get(name), "env") or {}
        if sorted(environment) != sorted(names.get(name, ())):
            raise ValueError(
                f"the report keeps the names of variant {name!r}'s environment, not their "
                "values, so its runs cannot be rerun from the report: explain the result in "
                "Python with explain(result, variants=...), or check with --explain"
            )
        rebuilt[name] = {"args": list(arguments), "env": dict(environment)}
    return rebuilt


def _variant_part(variant: Any, part: str) -> Any:
    """A declared variant's `args` or `env`: a mapping's key or a RunVariant's field."""
    if variant is None:
        return None
    return variant.get(part) if isinstance(variant, Mapping) else getattr(variant, part)


def _explained(
    result: Any,
    sides: tuple[Side, Side],
    reruns: Reruns,
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
    traces = [trace_of(root / name, rank) for name in ("a", "b")]
    first_op, trace_message = None, None
    if not traceable:
        trace_message = (
            "the runs part at step 0, before any training step: in what built, seeded or "
            "loaded the initial state (no op of a step to trace)"
        )
    elif all(path.exists() for path in traces):
        # Reading traces needs torch; the check's own process imports none until here.
        from trainparity._internal.why.forensics.trace_diff import diff_traces

        diff = diff_traces(*traces)
        first_op = _op_fields(diff.first_divergence)
        trace_message = diff.message
    else:
        trace_message = f"no trace of step {step} was written (does the script call record() at step {step - 1} and {step}?)"
    original = parting(traced["a"], traced["b"])
    environments = [{**reruns.settings.environment, **side.extra_env} for side in sides]
    knobs = differing_knobs(*environments)
    recorded = [reruns.fingerprints("a"), reruns.fingerprints("b")]
    gpu = ran_on_gpu([*recorded[0], *recorded[1]], getattr(reruns.case, "device", None))
    trials = tested_leads(
        knobs, reruns, sides, traced, original, max_reruns=max_reruns, repeats=repeats, gpu=gpu
    )
    trials = _threads_set_in_code(recorded, knobs, trials)
    confirmed = [trial for trial in trials if trial.status == "confirmed"]
    # An op whose calls could not be paired (call_counts) says nothing of a generator's state.
    rng_op = (
        first_op is not None
        and not first_op.get("call_counts")
        and any(word in first_op.get("op", "") for word in _RNG_OPS)
    )
    sentence = explanation_sentence(
        confirmed, trials, first_op, rng_op, bool(knobs), original, repeats
    )
    sentence += _not_controllable_clause(confirmed, trials)
    if rank:
        sentence += f" (rank {rank}, whose records part first)"
    # Two runs of one environment that are not repeats (a resume, a variant's own arguments)
    # are explained by the op where they part.
    own_difference = not knobs and not repeats and first_op is not None
    outcome = Outcome.PASS if confirmed or rng_op or own_difference else Outcome.ABSTAIN
    if restored_at is not None:
        sentence = (
            f"right after loading, the resumed run already differs at step {restored_at}: the "
            f"divergence is in what the checkpoint restored{_restored_words(result)}; {sentence}"
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


def _threads_set_in_code(
    recorded: list[list[tuple[str, Mapping[str, Any]]]],
    knobs: list[Any],
    trials: list[LeadTrial],
) -> list[LeadTrial]:
    """`trials` led by the thread counts the two sides' fingerprints show, when they differ
    although no thread variable differs between their environments: the script sets them."""
    counts = [sorted(set(thread_counts(side))) for side in recorded]
    if not all(counts) or counts[0] == counts[1]:
        return trials
    if any(knob.name == "threads" for knob, _, _ in knobs):
        return trials  # a thread variable differs: its rerun tested (and checked) it
    if any(trial.knob == "threads" and trial.status == NOT_CONTROLLABLE for trial in trials):
        return trials  # the pinned rerun already says so
    shown = ["/".join(map(str, side)) for side in counts]
    lead = LeadTrial(
        "threads",
        f"torch_intra_op={shown[0]}",
        f"torch_intra_op={shown[1]}",
        NOT_CONTROLLABLE,
        f"the two sides' recorded fingerprints show {shown[0]} and {shown[1]} intra-op threads "
        "(threads.torch_intra_op) while their environments set the same: the script sets its "
        "thread count in code, so no rerun from outside can pin it",
    )
    return [lead, *(trial for trial in trials if trial.knob != "threads")]


def _not_controllable_clause(confirmed: list[LeadTrial], trials: list[LeadTrial]) -> str:
    """What to do about knobs the script sets itself, when none explained the divergence."""
    knobs = [trial.knob for trial in trials if trial.status == NOT_CONTROLLABLE]
    if confirmed or not knobs:
        return ""
    return (
        f"; {', '.join(knobs)} is set by the script itself (not controllable from outside, "
        "see its lead): fix it in the script to test it, or judge these runs with "
        "NoiseComparison()"
    )


def _checked_case(result: Any) -> CaseArgument:
    """The case the check ran: as it was given (a result), else rebuilt from its report."""
    given = _field(result, "case_argument")
    if given is not None:
        return given
    command = _field(result, "command_case")
    if isinstance(command, Mapping):
        return CommandCase(**command)
    return _field(result, "case")


def _restored_words(result: Any) -> str:
    """' (PATH: BASELINE in the uninterrupted run, CANDIDATE restored)': what the load got wrong."""
    first = _field(result, "primary_difference")
    if first is None:
        return ""
    fields = first if isinstance(first, Mapping) else vars(first)
    path, baseline, candidate = (fields.get(key) for key in ("path", "baseline", "candidate"))
    if not path:
        return ""
    if baseline is None or candidate is None:
        return f" ({path})"
    return f" ({path}: {baseline} in the uninterrupted run, {candidate} restored)"


def _field(result: Any, name: str) -> Any:
    """A result's field, or a machine report's key (`trainparity explain REPORT.json`)."""
    if isinstance(result, Mapping):
        return result.get(name)
    return getattr(result, name, None)


def _op_fields(divergence: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if divergence is None:
        return None
    keep = (
        "call_counts",
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
