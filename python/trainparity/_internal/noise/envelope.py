"""One step measured and judged against the noise envelope: k uninterrupted samples, at most one candidate.

The trees are walked as the exact comparison walks them (docs/compatibility.md, "Comparison"), with
every floating-point leaf (tensor or Python float) set aside. Anything else
that differs is an exact difference: between two samples it means the
uninterrupted runs disagree on a path that must be exact; between the first
sample and the candidate it is one of the candidate's differences. Each
set-aside path is then measured once over all its leaves (native/distances.py
reads each buffer once) and judged:

- noise = the largest ‖s_i − s_j‖₂ over two samples; excursion = the
  candidate's ‖c − s_i‖₂ to the nearest sample; both are reported relative
  to the largest sample norm;
- a path whose samples are byte-identical (noise exactly 0) stays exact,
  unless a floor is declared, or the step is noisy: when some other
  floating-point path's samples differ at the same step, nondeterminism is
  at work and a few samples can agree on a small tensor by chance (a sum of
  12 terms has few possible roundings), so the tensor's noise is taken as
  one rounding unit of its dtype (its machine epsilon, relative); a Python
  float they agree on (a learning rate) stays exact;
- the candidate leaves the envelope when excursion > factor × noise +
  floor_rtol × norm + floor_atol.

A step at which every sample agrees bit for bit is judged exactly: on a
deterministic job NoiseComparison gives the exact comparison's verdicts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from trainparity._internal.comparison.noise_policy import NoiseComparison
from trainparity._internal.comparison.policies import (
    Difference,
    ExactComparison,
    _Traversal,
    summarize,
)
from trainparity._internal.comparison.tensors import TensorValueComparison, compare_tensor_values
from trainparity._internal.native.distances import Distances, buffer_distances
from trainparity._internal.native.dtypes import info_for_text
from trainparity._internal.state.freeze import FrozenTensor
from trainparity._internal.state.paths import StatePath, component_of, render_path

__all__ = ["EXIT_REASON", "NoiseMemory", "PathEnvelope", "StepEnvelope", "judge_step"]

EXIT_REASON = "noise_envelope"


@dataclass(frozen=True)
class PathEnvelope:
    """One floating-point path at one step: noise, excursion and limit, relative to the samples' norm."""

    path: str
    noise: float
    excursion: float | None  # None: no candidate at this step
    limit: float
    nearest: int | None  # the sample the candidate came closest to
    exact: bool  # the samples are byte-identical and no floor is declared: judged bit for bit
    # The noise rounding alone allows at a noisy step (one unit of the dtype at the path's
    # largest norm so far, relative to its norm now), where it exceeds every measured noise.
    rounding_unit: float = 0.0
    # The samples' largest norm the relative numbers are taken against (not in reports): a
    # component's row weighs its paths by it (noise/walk.py, StepRow.of).
    scale: float = field(default=0.0, compare=False)

    @property
    def ratio(self) -> float | None:
        """excursion / noise (0 when the candidate equals a sample; inf past a zero noise)."""
        if self.excursion is None:
            return None
        if self.excursion == 0:
            return 0.0
        noise = max(self.noise, self.rounding_unit)
        return self.excursion / noise if noise > 0 else math.inf

    @property
    def outside(self) -> bool:
        return self.excursion is not None and self.excursion > self.limit

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "noise": self.noise,
            "excursion": self.excursion,
            "limit": self.limit,
            "ratio": self.ratio,
            **({"rounding_unit": self.rounding_unit} if self.rounding_unit else {}),
        }


@dataclass(frozen=True)
class StepEnvelope:
    """What one step's judgment found.

    `sample_differences`: (sample index, difference from sample 0) on paths
    that must be exact, or where the samples' structure differs: the
    uninterrupted runs disagree where noise cannot explain it.
    `differences`: the candidate's, in traversal order: exact differences and
    envelope exits (reason "noise_envelope").
    `paths`: every measured floating-point path whose noise or excursion is
    not 0. `unmeasured`: paths whose samples differ but hold no values
    (summary-mode records), which the envelope could not judge.
    """

    sample_differences: tuple[tuple[int, Difference], ...]
    differences: tuple[Difference, ...]
    paths: tuple[PathEnvelope, ...]
    unmeasured: tuple[str, ...] = ()
    leaf_paths: tuple[str, ...] = field(default=(), repr=False)

    def too_noisy(self, max_noise: float | None) -> PathEnvelope | None:
        """The path of largest noise above `max_noise` (None when none is, or no limit)."""
        if max_noise is None:
            return None
        over = [entry for entry in self.paths if entry.noise > max_noise]
        return max(over, key=lambda entry: entry.noise) if over else None

    def worst(self) -> PathEnvelope | None:
        """The candidate's path of largest excursion/noise ratio (ties: the first in order)."""
        judged = [entry for entry in self.paths if entry.ratio is not None and entry.ratio > 0]
        return max(judged, key=lambda entry: entry.ratio) if judged else None


class NoiseMemory:
    """What the steps judged so far of one trajectory leave to the next (see judge_step).

    Per path the largest absolute noise and the largest samples' norm seen; per
    component the largest pooled relative noise and RMS element; and whether
    any step was noisy.
    """

    def __init__(self) -> None:
        self.path_noise: dict[str, float] = {}  # absolute
        self.path_scale: dict[str, float] = {}
        self.component_noise: dict[str, float] = {}  # relative, pooled over the component
        self.component_element: dict[str, float] = {}  # a component's largest RMS element
        self.noisy = False

    def relative(self, path: str) -> float:
        """A path's largest absolute noise so far relative to its largest norm (0: none)."""
        scale = self.path_scale.get(path, 0.0)
        return self.path_noise.get(path, 0.0) / scale if scale > 0 else 0.0


def judge_step(
    policy: NoiseComparison,
    samples: Sequence[object],
    candidate: object | None = None,
    noise_so_far: NoiseMemory | None = None,
) -> StepEnvelope:
    """Judge `candidate` against the envelope of `samples` (frozen trees or Snapshots) at one step.

    `noise_so_far` carries the envelope across the steps of one trajectory
    (docs/resume.md, "The envelope's statistical model"): drift from reordered
    sums does not shrink, so a path's noise is at least the largest absolute
    noise measured on it before; once a step is noisy, every tensor's noise is
    at least its component's pooled relative noise (so far) times the tensor's
    largest norm. Every tensor is allowed one rounding unit of its dtype at
    that norm (or per element of its component's typical size), and a Python
    float one float32 unit at a noisy step. It is updated with this step's
    measurements.
    """
    if not samples:
        raise ValueError("judge_step needs at least one sample")
    memory = noise_so_far if noise_so_far is not None else NoiseMemory()
    leaves: dict[str, list[Any]] = {}
    sample_differences: list[tuple[int, Difference]] = []
    for index, sample in enumerate(samples[1:], start=1):
        walk = _SettingAside(leaves, index)
        sample_differences.extend((index, found) for found in walk.run(samples[0], sample))
    candidate_index = len(samples)
    ordered: list[tuple[int, Difference]] = []
    if candidate is not None:
        walk = _SettingAside(leaves, candidate_index)
        found_differences = walk.run(samples[0], candidate)
        ordered.extend(zip(walk.sequence, found_differences, strict=True))
        order = walk.order
    else:
        walk = _SettingAside(leaves, 0)
        walk.run(samples[0], samples[0])
        order = walk.order
    measured: list[_Measured] = []
    unmeasured: list[str] = []
    for path in sorted(order, key=order.__getitem__):
        found = leaves.get(path, {})
        if any(index not in found for index in range(len(samples))):
            continue  # a structure difference between samples, reported as such
        sample_leaves = [found[index] for index in range(len(samples))]
        candidate_leaf = found.get(candidate_index) if candidate is not None else None
        if candidate is not None and candidate_index not in found:
            continue  # a structure difference of the candidate, reported as such
        entry = _measure_path(path, sample_leaves, candidate_leaf)
        if entry is None:
            unmeasured.append(path)
            if candidate_leaf is not None and not _same_digest(sample_leaves[0], candidate_leaf):
                ordered.append(
                    (order[path], _exit_difference(path, sample_leaves, candidate_leaf, None))
                )
            continue
        measured.append(entry)
    noisy = memory.noisy or any(entry.noise_abs > 0 for entry in measured)
    pooled = _pooled_component_noise(measured, memory)
    _remember_elements(measured, memory)
    paths: list[PathEnvelope] = []
    for entry in measured:
        judged = _judge_path(policy, entry, memory, pooled, noisy)
        own_noise = entry.noise_abs > 0 or memory.path_noise.get(entry.path, 0.0) > 0
        if own_noise or (judged.excursion or 0) > 0:
            paths.append(judged)  # a path quiet on its own only shows where the candidate moved
        if judged.outside:
            ordered.append(
                (
                    order[entry.path],
                    _exit_difference(entry.path, entry.samples, entry.candidate, judged),
                )
            )
    _remember(memory, measured, pooled, noisy)
    ordered.sort(key=lambda item: item[0])
    return StepEnvelope(
        tuple(sample_differences),
        tuple(difference for _, difference in ordered),
        tuple(paths),
        tuple(unmeasured),
        tuple(order),
    )


# Walking: exact differences out, floating-point leaves set aside --------------------


class _Deferred(ExactComparison):
    """Exact for everything but floating-point tensor values, which are judged later."""

    def tensor_values(
        self, baseline: FrozenTensor, candidate: FrozenTensor
    ) -> TensorValueComparison:
        if info_for_text(baseline.dtype).is_floating:
            return TensorValueComparison(baseline.numel, 0, None, 0.0, 0.0, 0.0, "deferred")
        return compare_tensor_values(baseline, candidate)


class _SettingAside(_Traversal):
    """The exact traversal, putting each floating-point leaf pair into `leaves[path]`.

    `order` numbers every set-aside path and `sequence` every difference in
    traversal order, so envelope exits and exact differences keep that order.
    """

    def __init__(self, leaves: dict[str, Any], index: int) -> None:
        super().__init__(_Deferred(), stop_at_first=False, on_tensor=self._set_aside_tensor)
        self.leaves = leaves
        self.index = index
        self.order: dict[str, int] = {}
        self.sequence: list[int] = []
        self._counter = 0

    def _next(self) -> int:
        self._counter += 1
        return self._counter

    def _add(self, difference: Difference) -> None:
        self.sequence.append(self._next())
        super()._add(difference)

    def _keep(self, path: str, left: Any, right: Any) -> None:
        self.order[path] = self._next()
        slot = self.leaves.setdefault(path, {})
        slot.setdefault(0, left)
        slot[self.index] = right

    def _set_aside_tensor(self, record: Any) -> None:
        if record.values.method == "deferred":
            self._keep(record.path, record.baseline, record.candidate)

    def _node(self, left: object, right: object, path: StatePath) -> list:
        if type(left) is float and type(right) is float:
            self._keep(render_path(path), left, right)
            return []
        return super()._node(left, right, path)


# Measuring and judging one path -------------------------------------------------------


@dataclass(frozen=True)
class _Measured:
    """One path's leaves measured at one step: absolute numbers, before any carrying."""

    path: str
    samples: list[Any]
    candidate: Any | None
    scale: float  # the largest sample norm
    noise_abs: float  # the largest distance between two samples (inf: non-finite values)
    excursion_abs: float | None  # the candidate's distance to the nearest sample
    nearest: int | None
    is_tensor: bool
    nonfinite: bool = False  # some leaf holds NaN or infinity
    numel: int = 1

    @property
    def pooled(self) -> bool:
        """Whether the path takes part in its component's pooled noise: finite, noisy samples."""
        return math.isfinite(self.noise_abs) and self.noise_abs > 0 and self.scale > 0


def _measure_path(path: str, samples: list[Any], candidate: Any | None) -> _Measured | None:
    leaves = [*samples, *([candidate] if candidate is not None else [])]
    measured = _measure(leaves)
    if measured is None:
        return None
    k = len(samples)
    scale = max(measured.norms[:k])
    sample_pairs = [(i, j) for i in range(k) for j in range(i + 1, k)]
    identical_samples = all(measured.identical(i, j) for i, j in sample_pairs)
    nonfinite = any(measured.nonfinite)
    if nonfinite:
        # NaN or infinity: no distance is meaningful; equal bytes are the only agreement.
        noise_abs = 0.0 if identical_samples else math.inf
    else:
        noise_abs = max((measured.distance(i, j) for i, j in sample_pairs), default=0.0)
    excursion_abs: float | None = None
    nearest: int | None = None
    if candidate is not None:
        c = k
        same = [i for i in range(k) if measured.identical(i, c)]
        if same:
            excursion_abs, nearest = 0.0, same[0]
        elif nonfinite:
            excursion_abs, nearest = math.inf, 0
        else:
            nearest = min(range(k), key=lambda i: (measured.distance(i, c), i))
            excursion_abs = measured.distance(nearest, c)
            if excursion_abs == 0.0:
                excursion_abs = math.ulp(0.0)  # equal values, other bytes (-0.0, NaN payloads)
    return _Measured(
        path,
        samples,
        candidate,
        scale,
        noise_abs,
        excursion_abs,
        nearest,
        isinstance(samples[0], FrozenTensor),
        nonfinite,
        getattr(samples[0], "numel", 1),
    )


def _pooled_component_noise(measured: list[_Measured], memory: NoiseMemory) -> dict[str, float]:
    """Per component: the median relative noise of its noisy leaves, at most so far.

    A path of few elements, or one whose samples happen to lie close, estimates
    its own spread poorly (three samples of one number can lie arbitrarily
    close); its component's noisy leaves together do not, and one source of
    nondeterminism moves all of them (docs/resume.md, "The envelope's
    statistical model"). The median, not the noise of all elements taken
    together: one tensor whose rounding is amplified (a near-zero gradient
    under Adam) must not widen every other path's envelope; and only leaves
    whose samples differ, so that frozen weights do not pull it to zero.
    """
    found: dict[str, list[float]] = {}
    for entry in measured:
        if entry.pooled:
            found.setdefault(component_of(entry.path), []).append(entry.noise_abs / entry.scale)
    pooled = dict(memory.component_noise)
    for component, values in found.items():
        values.sort()
        middle = len(values) // 2
        here = values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2
        pooled[component] = max(pooled.get(component, 0.0), here)
    return pooled


def _judge_path(
    policy: NoiseComparison,
    entry: _Measured,
    memory: NoiseMemory,
    pooled: dict[str, float],
    noisy: bool,
) -> PathEnvelope:
    """The path's envelope: its noise (own, carried, pooled, rounding) and the candidate against it.

    A tensor is always allowed factor × one rounding unit of its dtype at its
    largest norm so far: two runs of a job declared nondeterministic can agree
    bit for bit at a step by chance while a third rounds one ulp apart. Where
    nothing was noisy yet, a path beyond that keeps the exact reason
    (`exact`), as the exact comparison words it.
    """
    scale = entry.scale
    noise_abs = entry.noise_abs
    finite = math.isfinite(noise_abs)
    carried_own = 0.0
    if finite:
        carried_own = max(
            memory.path_noise.get(entry.path, 0.0), memory.relative(entry.path) * scale
        )
    carried = 0.0
    largest = max(scale, memory.path_scale.get(entry.path, 0.0))
    if finite and noisy and not entry.nonfinite and (entry.is_tensor or noise_abs or carried_own):
        # Once a step is noisy, a tensor (or a Python float that is noisy itself) has at least
        # its component's noise, times its largest norm so far: a value passing through zero
        # still carries the drift of its earlier terms. A float the samples agree on (a
        # learning rate) stays exact.
        carried = max(carried, pooled.get(component_of(entry.path), 0.0) * largest)
    unit = 0.0
    if entry.nonfinite:
        pass  # NaN or infinity: equal bytes are the only agreement
    elif finite and entry.is_tensor:
        unit = _EPSILON.get(
            info_for_text(entry.samples[0].dtype).name, 2.0**-2
        )  # float8 formats: a quarter is their rounding scale
    elif finite and noisy:
        # A Python float at a noisy step: one computed from float32 tensors (a loss's .item(), a
        # plateau scheduler's best loss) carries their rounding even where the samples agree.
        unit = _EPSILON["float32"]
    own = max(noise_abs, carried_own) * _few_elements_widening(entry, policy.factor)
    effective = max(own, carried)
    floor_abs = policy.floor_rtol * scale + policy.floor_atol
    # Judged with the exact comparison's reason: a Python float nobody's noise moved (a
    # learning rate), and a tensor before any noise showed.
    exact = effective == 0 and not policy.has_floor and not (entry.is_tensor and noisy)
    if unit and entry.is_tensor:
        # At least one unit per element of the component's typical size (see _remember_elements).
        typical = memory.component_element.get(component_of(entry.path), 0.0)
        largest = max(largest, typical * math.sqrt(entry.numel))
    rounding = unit * largest if unit else 0.0
    if exact and not rounding:
        limit_abs = 0.0  # bit for bit (a Python float, NaN or infinity: no rounding allowance)
    else:
        limit_abs = policy.factor * max(effective, rounding) + floor_abs
    excursion_abs = entry.excursion_abs
    if excursion_abs is not None and excursion_abs == math.ulp(0.0):
        # Equal values in other bytes (-0.0, NaN payloads): a difference only where judged exactly.
        excursion_abs = math.inf if exact else 0.0
    return PathEnvelope(
        path=entry.path,
        noise=_relative(effective, scale),
        excursion=None if excursion_abs is None else _relative(excursion_abs, scale),
        limit=_relative(limit_abs, scale),
        nearest=entry.nearest,
        exact=exact,
        rounding_unit=_relative(rounding, scale) if rounding > effective else 0.0,
        scale=scale if math.isfinite(scale) else 0.0,
    )


# The ratio excursion / noise that a clean candidate exceeds with probability 5e-6 per step,
# for a leaf of n elements (n independent directions at most) and k samples, under the
# model of docs/resume.md ("The envelope's statistical model": k + 1 independent Gaussian
# draws; 4M draws per cell). A leaf of more elements, or more samples, needs no widening
# at the default factor 8.
_EXIT_RATIO = {
    (1, 2): 101_609.0, (2, 2): 439.0, (3, 2): 58.5,
    (1, 3): 217.0, (2, 3): 17.2, (3, 3): 7.6,
    (1, 4): 39.9, (2, 4): 6.7, (3, 4): 3.9,
    (1, 5): 14.5, (2, 5): 4.3, (3, 5): 2.8,
}  # fmt: skip


def _few_elements_widening(entry: _Measured, factor: float) -> float:
    """How much a leaf of 1–3 elements widens its own noise: a spread of k samples of one
    number is a poor estimate of the next one's distance (a Cauchy-like tail)."""
    samples = min(len(entry.samples), 5)
    ratio = _EXIT_RATIO.get((entry.numel, samples))
    return max(1.0, ratio / factor) if ratio is not None else 1.0


def _remember_elements(measured: list[_Measured], memory: NoiseMemory) -> None:
    """Per component, the largest RMS element magnitude of its tensors so far.

    A tensor born of cancellation (a bias gradient that sums to almost zero
    over the batch) carries rounding errors of the size of the terms it summed,
    not of its own tiny norm; its component's typical element is their scale.
    """
    totals: dict[str, list[float]] = {}
    for entry in measured:
        if entry.is_tensor and not entry.nonfinite and entry.scale > 0 and entry.numel > 0:
            found = totals.setdefault(component_of(entry.path), [0.0, 0.0])
            found[0] += entry.scale**2
            found[1] += entry.numel
    for component, (squares, count) in totals.items():
        element = math.sqrt(squares / count)
        memory.component_element[component] = max(
            memory.component_element.get(component, 0.0), element
        )


def _remember(
    memory: NoiseMemory, measured: list[_Measured], pooled: dict[str, float], noisy: bool
) -> None:
    for entry in measured:
        if math.isfinite(entry.noise_abs) and entry.noise_abs > 0:
            memory.path_noise[entry.path] = max(
                memory.path_noise.get(entry.path, 0.0), entry.noise_abs
            )
        if math.isfinite(entry.scale):
            memory.path_scale[entry.path] = max(memory.path_scale.get(entry.path, 0.0), entry.scale)
    memory.component_noise.update(pooled)
    memory.noisy = noisy


# Machine epsilon (relative rounding unit) of each floating dtype; Python floats are float64.
_EPSILON = {
    "float64": 2.0**-52,
    "float32": 2.0**-23,
    "bfloat16": 2.0**-7,
    "float16": 2.0**-10,
    "complex128": 2.0**-52,
    "complex64": 2.0**-23,
    "complex32": 2.0**-10,
}


def _relative(value: float, scale: float) -> float:
    if value == 0.0:
        return 0.0
    return value / scale if scale > 0 else math.inf


def _measure(leaves: list[Any]) -> Distances | None:
    """Distances of the leaves; None when some leaf holds no values and the digests differ."""
    if all(type(leaf) is float for leaf in leaves):
        return _float_distances(leaves)
    tensors: list[FrozenTensor] = leaves
    digests = [leaf.digest for leaf in tensors]
    if None not in digests and len(set(digests)) == 1:
        count = len(tensors)
        return Distances(
            (_small_norm(tensors[0]),) * count,
            {(i, j): (0.0, True) for i in range(count) for j in range(i + 1, count)},
            (0,) * count,
        )
    if any(leaf.data is None for leaf in tensors):
        return None
    return buffer_distances(tensors[0].dtype, [leaf.data for leaf in tensors])


# Identical samples of a tensor up to this many elements still have their norm read: a small
# tensor's largest norm so far scales its rounding unit later (a bias passing through zero).
_NORM_READ_LIMIT = 65_536


def _small_norm(tensor: FrozenTensor) -> float:
    """The L2 norm of a small tensor's values; 0.0 (unread) for a large one or one without values."""
    if tensor.data is None or tensor.numel > _NORM_READ_LIMIT:
        return 0.0
    norm = buffer_distances(tensor.dtype, [tensor.data]).norms[0]
    return norm if math.isfinite(norm) else 0.0


def _float_distances(values: list[float]) -> Distances:
    count = len(values)
    pairs = {}
    for i in range(count):
        for j in range(i + 1, count):
            same = _float_bits(values[i]) == _float_bits(values[j])
            pairs[(i, j)] = (0.0 if same else abs(values[i] - values[j]), same)
    return Distances(
        tuple(abs(value) for value in values),
        pairs,
        tuple(0 if math.isfinite(value) else 1 for value in values),
    )


def _float_bits(value: float) -> bytes:
    import struct

    return struct.pack(">d", value)


def _same_digest(first: Any, second: Any) -> bool:
    return getattr(first, "digest", None) is not None and first.digest == second.digest


def _exit_difference(
    path: str, samples: list[Any], candidate: Any, entry: PathEnvelope | None
) -> Difference:
    """The Difference of a path the candidate left: exact paths keep the exact reason."""
    nearest = samples[entry.nearest if entry is not None and entry.nearest is not None else 0]
    if entry is None or entry.exact:
        reason = "tensor_value" if isinstance(candidate, FrozenTensor) else "value"
        return Difference(path, reason, summarize(nearest), summarize(candidate))
    return Difference(
        path,
        EXIT_REASON,
        summarize(nearest),
        summarize(candidate),
        max_rel_error=entry.excursion,
    )
