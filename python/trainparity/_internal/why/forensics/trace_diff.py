"""Diff of two traces: the first op whose output differs, born there or inherited, and the leads that fit it."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from trainparity._internal.comparison.policies import (
    ComparisonPolicy,
    ToleranceComparison,
    policy_report_fields,
)
from trainparity._internal.comparison.states import checked_policy
from trainparity._internal.native.core import tensor_bytes
from trainparity._internal.native.cuda import compare_buffers
from trainparity._internal.outcomes import Outcome
from trainparity._internal.reports.reported import ReportedResult
from trainparity._internal.state.freeze import FrozenTensor
from trainparity._internal.state.tree_codec import SnapshotFileError
from trainparity._internal.why.environment_leads import EnvironmentLead, environment_leads
from trainparity._internal.why.forensics.leads import op_kind, rank_leads
from trainparity._internal.why.forensics.records import Trace, TraceOp, TraceValue
from trainparity._internal.why.forensics.trace_file import read_trace

__all__ = ["TraceDiff", "diff_traces"]

# Ops whose outputs cannot be where a divergence is born: aliases and allocations.
_PASSIVE_KINDS = frozenset({"view", "uninitialized"})


@dataclass(frozen=True, repr=False)
class TraceDiff(ReportedResult):
    """Where two traced steps first part, op by op.

    `first_divergence` is the first op (in the baseline's order, among ops
    found in both traces) whose output differs: exactly, or under a tolerance
    provably beyond it. `origin` says whether it was "born" there (its inputs
    are bit-identical on both sides) or "inherited" (`inherited_from`: the
    first differing input traced back to a leaf — a parameter, batch tensor,
    buffer — or to the op where a smaller difference was born).
    `error_growth` holds `[position, relative error]` for every compared op
    whose output differs (position among the `compared_op_count` ops; the
    error is a lower bound from the summaries unless both values were kept,
    and NaN when not even a bound is known). `environment_leads` are ranked
    for the kind of op the divergence starts in (`leads_ranked_for`).
    """

    outcome: Outcome
    message: str
    baseline: str
    candidate: str
    comparison_policy: str = "exact"
    comparison_rtol: float | None = None
    comparison_atol: float | None = None
    comparison_equal_nan: bool | None = None
    integrity: str = "verified"
    baseline_op_count: int = 0
    candidate_op_count: int = 0
    compared_op_count: int = 0
    differing_op_count: int = 0
    first_divergence: dict[str, Any] | None = None
    error_growth: tuple[tuple[int, float], ...] = ()
    only_in_baseline: tuple[str, ...] = ()
    only_in_candidate: tuple[str, ...] = ()
    leads_ranked_for: str | None = None
    environment_leads: tuple[EnvironmentLead, ...] = ()
    baseline_environment: dict[str, Any] | None = None
    candidate_environment: dict[str, Any] | None = None


def diff_traces(
    baseline: str | os.PathLike[str] | Trace,
    candidate: str | os.PathLike[str] | Trace,
    *,
    comparison: ComparisonPolicy | None = None,
    trust_digests: bool = False,
) -> TraceDiff:
    """Align two traces by (module path, phase, op name, call index) and find the first divergence.

    `comparison=None` is exact (digests decide). Under a ToleranceComparison
    an op diverges when its outputs provably break `|a-b| <= atol + rtol*|b|`:
    from the kept values element by element, else from the summaries (which
    can prove a violation but never closeness, so differing ops that the
    summaries cannot decide make the verdict ABSTAIN). Ops found in one trace
    only (another decomposition or kernel) are listed and skipped. Files are
    verified as they are read (`trust_digests=True` skips the tensor bytes).
    """
    policy = checked_policy(comparison)
    fields: dict[str, Any] = {
        "baseline": _name(baseline),
        "candidate": _name(candidate),
        "integrity": "digests trusted" if trust_digests else "verified",
        **policy_report_fields(policy),
    }
    try:
        left = _loaded(baseline, trust_digests)
        right = _loaded(candidate, trust_digests)
    except (OSError, SnapshotFileError) as error:
        return TraceDiff(Outcome.ERROR, _unreadable(error), **fields)
    return _Differ(left, right, policy).result(fields)


def _name(source: Any) -> str:
    if isinstance(source, Trace):
        return source.path or "<trace in memory>"
    return os.fspath(source)


def _loaded(source: Any, trust_digests: bool) -> Trace:
    if isinstance(source, Trace):
        return source
    return read_trace(source, trust_digests=trust_digests)


def _unreadable(error: Exception) -> str:
    if isinstance(error, SnapshotFileError):
        return str(error)
    name = getattr(error, "filename", None)
    return f"trace file {name} could not be opened: {error.strerror or error}; check the path"


@dataclass(frozen=True)
class _Verdict:
    """How one pair of values compares."""

    differs: bool  # bytes or metadata differ
    beyond: bool  # counts as a divergence under the policy
    reason: str  # "equal", "dtype", "shape", "value", "nan_inf", "not compared"
    error: float  # relative error (exact from kept values, else a lower bound); NaN: unknown
    error_is_exact: bool = False  # from kept values: also proves closeness under a tolerance


_EQUAL = _Verdict(False, False, "equal", 0.0)


class _Differ:
    def __init__(self, left: Trace, right: Trace, policy: Any) -> None:
        self.left = left
        self.right = right
        self.tolerance = policy if isinstance(policy, ToleranceComparison) else None
        right_by_key = {op.key: op for op in right.ops}
        self.pairs: list[tuple[TraceOp, TraceOp]] = []
        matched_right: set[int] = set()
        self.only_left: list[TraceOp] = []
        for op in left.ops:
            other = right_by_key.get(op.key)
            if other is None:
                self.only_left.append(op)
            else:
                self.pairs.append((op, other))
                matched_right.add(other.index)
        self.only_right = [op for op in right.ops if op.index not in matched_right]
        self.counterpart = {a.index: b.index for a, b in self.pairs}
        # Ops are paired by call index within (module, phase, name). Where one side calls an op
        # more often in the step (a resume iterating past the batches it skips, a sampler's last
        # draw when its epoch ends), the calls of that group are paired with other calls: a
        # difference there says nothing of where the runs part, so those groups come last.
        self.counts = (_call_counts(left), _call_counts(right))

    # Values ------------------------------------------------------------------------------

    def _resolved(self, trace: Trace, index: int) -> TraceValue:
        value = trace.values[index]
        while value.kind == "view" and value.source >= 0:
            value = trace.values[value.source]
        return value

    def compare_values(self, left_index: int, right_index: int) -> _Verdict:
        a = self._resolved(self.left, left_index)
        b = self._resolved(self.right, right_index)
        if a.dtype != b.dtype:
            return _Verdict(True, True, "dtype", math.nan)
        if a.shape != b.shape:
            return _Verdict(True, True, "shape", math.nan)
        if "uninitialized" in (a.kind, b.kind) or a.digest is None or b.digest is None:
            return _Verdict(False, False, "not compared", 0.0)
        if a.digest == b.digest:
            return _EQUAL
        kept_a, kept_b = self.left.kept.get(a.index), self.right.kept.get(b.index)
        if kept_a is not None and kept_b is not None:
            return self._compare_kept(a.dtype, kept_a, kept_b)
        bound, violated = self._bound(a, b)
        nan_inf = (a.nan_count, a.inf_count) != (b.nan_count, b.inf_count)
        if self.tolerance is None:
            return _Verdict(True, True, "nan_inf" if nan_inf else "value", bound)
        beyond = violated or (nan_inf and not self.tolerance.equal_nan)
        return _Verdict(True, beyond, "nan_inf" if nan_inf else "value", bound)

    def _bound(self, a: TraceValue, b: TraceValue) -> tuple[float, bool]:
        """A lower bound of ‖a−b‖₂/‖b‖₂ from the summaries, and whether it proves the tolerance broken.

        ‖a−b‖₂ ≥ |‖a‖₂−‖b‖₂|, ≥ |Σa−Σb|/√n and ≥ max|a−b| ≥ |max|a|−max|b||.
        `|a−b| ≤ atol + rtol·|b|` everywhere would give ‖a−b‖₂ ≤ atol·√n + rtol·‖b‖₂
        and max|a−b| ≤ atol + rtol·max|b|; a bound above either proves a violation.
        """
        numbers = (a.sum, b.sum, a.l2_norm, b.l2_norm, a.max_abs, b.max_abs)
        if any(math.isnan(number) for number in numbers):
            return math.nan, False
        count = max(b.count, 1)
        l2_gap = abs(a.l2_norm - b.l2_norm)
        sum_gap = abs(a.sum - b.sum) / math.sqrt(count)
        max_gap = abs(a.max_abs - b.max_abs)
        lower = max(l2_gap, sum_gap, max_gap)
        relative = lower / b.l2_norm if b.l2_norm > 0 else (math.inf if lower > 0 else 0.0)
        if self.tolerance is None:
            return relative, lower > 0
        rtol, atol = self.tolerance.rtol, self.tolerance.atol
        violated = max(l2_gap, sum_gap) > atol * math.sqrt(count) + rtol * b.l2_norm or (
            max_gap > atol + rtol * b.max_abs
        )
        return relative, violated

    def _compare_kept(self, dtype: str, left: Any, right: Any) -> _Verdict:
        mode: dict[str, Any] = {}
        if self.tolerance is not None:
            mode = {
                "rtol": self.tolerance.rtol,
                "atol": self.tolerance.atol,
                "equal_nan": self.tolerance.equal_nan,
            }
        (_, mismatches, _, _, relative_rms), _ = compare_buffers(
            dtype, _buffer(left), _buffer(right), **mode
        )
        return _Verdict(True, mismatches > 0, "value", relative_rms, error_is_exact=True)

    # Ops ---------------------------------------------------------------------------------

    def compare_outputs(self, a: TraceOp, b: TraceOp) -> _Verdict | None:
        """The worst output verdict of a matched pair; None for ops that cannot diverge."""
        kinds = {self.left.values[index].kind for index in a.outputs}
        if not a.outputs or kinds <= _PASSIVE_KINDS:
            return None
        if len(a.outputs) != len(b.outputs):
            return _Verdict(True, True, "output count", math.nan)
        worst: _Verdict | None = None
        for left_index, right_index in zip(a.outputs, b.outputs, strict=True):
            verdict = self.compare_values(left_index, right_index)
            if worst is None or _rank(verdict) > _rank(worst):
                worst = verdict
        return worst

    def differing_inputs(self, a: TraceOp, b: TraceOp) -> list[tuple[int, int, _Verdict]]:
        """Input pairs whose bytes or metadata differ (positionally; extra inputs count as differing)."""
        found = []
        for left_index, right_index in zip(a.inputs, b.inputs, strict=False):
            verdict = self.compare_values(left_index, right_index)
            if verdict.differs:
                found.append((left_index, right_index, verdict))
        if len(a.inputs) != len(b.inputs):
            found.append((-1, -1, _Verdict(True, True, "input count", math.nan)))
        return found

    def origin(self, a: TraceOp, b: TraceOp) -> dict[str, Any]:
        """Where a difference in this pair's inputs comes from: a leaf, or the op it was born in."""
        visited: set[int] = set()
        while True:
            visited.add(a.index)
            differing = self.differing_inputs(a, b)
            if not differing:
                return {"kind": "born", "op": a, "description": a.label()}
            left_index, right_index, verdict = differing[0]
            if left_index < 0:
                return {
                    "kind": "structure",
                    "op": a,
                    "description": f"{a.label()} takes {len(a.inputs)} inputs in the baseline "
                    f"and {len(b.inputs)} in the candidate",
                }
            value = self._resolved(self.left, left_index)
            if value.kind in ("leaf", "mutated") or value.producer < 0:
                what = {"dtype": "its dtype", "shape": "its shape"}.get(
                    verdict.reason, "its values"
                )
                return {
                    "kind": "input",
                    "value": value,
                    "reason": verdict.reason,
                    "description": f"{self.left.describe_value(value.index)}; {what} differ",
                }
            producer = self.left.ops[value.producer]
            other = self.counterpart.get(producer.index)
            if other is None or producer.index in visited:
                return {
                    "kind": "one_side",
                    "op": producer,
                    "description": f"output of {producer.label()}, an op found in the "
                    "baseline only",
                }
            a, b = producer, self.right.ops[other]

    # The result --------------------------------------------------------------------------

    def misaligned(self, op: TraceOp) -> tuple[int, int] | None:
        """(baseline's, candidate's) call counts of `op`'s group where they differ, else None."""
        group = op.key[:3]
        left, right = self.counts[0].get(group, 0), self.counts[1].get(group, 0)
        return None if left == right else (left, right)

    def result(self, fields: dict[str, Any]) -> TraceDiff:
        growth: list[tuple[int, float]] = []
        first: tuple[int, TraceOp, TraceOp, _Verdict] | None = None
        first_misaligned: tuple[int, TraceOp, TraceOp, _Verdict] | None = None
        undecided = passed_over = 0
        for position, (a, b) in enumerate(self.pairs):
            verdict = self.compare_outputs(a, b)
            if verdict is None or not verdict.differs:
                continue
            growth.append((position, verdict.error))
            if verdict.beyond and self.misaligned(a) is not None:
                passed_over += 1
                if first_misaligned is None:
                    first_misaligned = (position, a, b, verdict)
            elif verdict.beyond and first is None:
                first = (position, a, b, verdict)
            elif not verdict.beyond and not verdict.error_is_exact:
                undecided += 1
        # Only ops of misaligned groups differ: name the first, saying what it is.
        first = first or first_misaligned
        leads = environment_leads(self.left.environment, self.right.environment)
        common = {
            **fields,
            "baseline_op_count": len(self.left.ops),
            "candidate_op_count": len(self.right.ops),
            "compared_op_count": len(self.pairs),
            "differing_op_count": len(growth),
            "error_growth": tuple(growth),
            "only_in_baseline": tuple(op.label() for op in self.only_left),
            "only_in_candidate": tuple(op.label() for op in self.only_right),
            "baseline_environment": self.left.environment,
            "candidate_environment": self.right.environment,
        }
        skipped = len(self.only_left) + len(self.only_right)
        skipped_text = f"; {skipped} op(s) found in one trace only were skipped" if skipped else ""
        if first is None:
            if undecided:
                return TraceDiff(
                    Outcome.ABSTAIN,
                    f"{undecided} op output(s) differ, but their summaries cannot show whether "
                    "they break the tolerance; trace again keeping those modules' values "
                    f"(keep=) to decide{skipped_text}",
                    environment_leads=leads,
                    **common,
                )
            return TraceDiff(
                Outcome.PASS,
                f"the traces agree: {len(self.pairs)} ops compared, no output differs"
                + ("" if self.tolerance is None else " beyond the tolerance")
                + skipped_text,
                environment_leads=leads,
                **common,
            )
        position, a, b, verdict = first
        source = self.origin(a, b)
        if source["kind"] == "born" and source["op"] is a:
            origin, kind = "born", op_kind(a.name)
            message = f"first divergence at {a.label()}: born there (its inputs are bit-identical)"
        else:
            origin = "inherited"
            kind = "input" if source["kind"] == "input" else op_kind(source["op"].name)
            message = f"first divergence at {a.label()}: inherited from {source['description']}"
        counts = self.misaligned(a)
        if counts is not None:
            message += (
                f"; but {a.name} is called {counts[0]} times in the baseline's step and "
                f"{counts[1]} in the candidate's, so its calls may be paired with other calls: "
                "the first op whose output differed, not necessarily where the runs part"
            )
        if passed_over and counts is None:
            message += (
                f"; {passed_over} differing op(s) of groups called more often on one side "
                "(their calls cannot be paired) were passed over"
            )
        divergence = {
            "call_counts": None if counts is None else list(counts),
            "op": a.name,
            "module": a.module,
            "phase": a.phase,
            "call_index": a.call_index,
            "position": position,
            "baseline_index": a.index,
            "candidate_index": b.index,
            "reason": verdict.reason,
            "relative_error": verdict.error,
            "relative_error_is_exact": verdict.error_is_exact,
            "origin": origin,
            "inherited_from": None if origin == "born" else source["description"],
            "inherited_from_name": source["value"].name
            if source["kind"] == "input" and origin == "inherited"
            else None,
            "born_in": source["op"].label() if source["kind"] == "born" else None,
            "op_kind": kind,
            "baseline_output": _summary_text(self.left, a),
            "candidate_output": _summary_text(self.right, b),
        }
        return TraceDiff(
            Outcome.FAIL,
            message + skipped_text,
            first_divergence=divergence,
            leads_ranked_for=kind,
            environment_leads=rank_leads(leads, kind, a.name),
            **common,
        )


def _call_counts(trace: Trace) -> dict[tuple[str, str, str], int]:
    """How many times each (module, phase, op name) is called in a traced step."""
    counts: dict[tuple[str, str, str], int] = {}
    for op in trace.ops:
        group = op.key[:3]
        counts[group] = counts.get(group, 0) + 1
    return counts


def _rank(verdict: _Verdict) -> tuple[bool, bool, float]:
    error = verdict.error if not math.isnan(verdict.error) else math.inf
    return (verdict.beyond, verdict.differs, error)


def _buffer(tensor: Any) -> Any:
    if isinstance(tensor, FrozenTensor):
        return tensor.data
    return tensor_bytes(tensor.detach().cpu().contiguous())


def _summary_text(trace: Trace, op: TraceOp) -> str:
    parts = []
    for index in op.outputs:
        value = trace.values[index]
        shape = "x".join(map(str, value.shape)) or "scalar"
        digest = value.digest.hex()[:12] if value.digest else "-"
        parts.append(
            f"{shape} {value.dtype} digest {digest} sum {value.sum:.9g} "
            f"L2 {value.l2_norm:.9g} max|x| {value.max_abs:.9g}"
            + (
                f" NaN {value.nan_count} Inf {value.inf_count}"
                if value.nan_count or value.inf_count
                else ""
            )
        )
    return "; ".join(parts)
