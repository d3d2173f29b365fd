"""Environment leads: the facts that differ between two fingerprints, most likely causes of drift first.

Each difference is a lead to check, not a cause: it is sorted into a category
(SIMD, precision, threads, determinism, library version, hardware, other) with
a note on how such a difference changes results. The fingerprints themselves
are taken by environment.py. Where there is one environment and no second to
compare (two runs of one configuration that drift), `nondeterminism_hints`
names the usual causes it leaves open.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["EnvironmentLead", "environment_leads", "nondeterminism_hints", "ran_on_gpu"]


@dataclass(frozen=True)
class EnvironmentLead:
    """One fact that differs between two recorded environments: a lead to check, not a cause."""

    key: str
    category: str
    baseline: Any
    candidate: Any
    note: str


_CATEGORY_NOTES = {
    "simd": "vector instruction sets differ: other kernels run, with another summation order and FMA use",
    "precision": "precision settings differ (TF32, reduced-precision reductions, default dtype): results are rounded differently",
    "threads": "thread counts differ: parallel reductions split their work per thread, changing summation order",
    "determinism": "determinism settings differ: non-deterministic algorithms may be chosen",
    "library_version": "library versions differ: kernels and their reduction orders can change between releases",
    "hardware": "hardware differs: other kernels, FMA and reduction strategies",
    "other": "differs between the two recordings",
}
_CATEGORY_ORDER = tuple(_CATEGORY_NOTES)
# First matching prefix of the dotted fingerprint key decides the category.
_CATEGORY_PREFIXES = (
    ("cpu.simd", "simd"),
    ("cpu.torch_capability", "simd"),
    ("numpy.simd", "simd"),
    ("variables.NPY_", "simd"),
    ("precision.", "precision"),
    ("variables.NVIDIA_TF32_OVERRIDE", "precision"),
    ("threads.", "threads"),
    ("cpu.logical_cores", "threads"),
    ("variables.OMP_NUM_THREADS", "threads"),
    ("variables.MKL_NUM_THREADS", "threads"),
    ("determinism.", "determinism"),
    ("variables.CUBLAS_WORKSPACE_CONFIG", "determinism"),
    ("variables.PYTHONHASHSEED", "determinism"),
    ("torch.", "library_version"),
    ("numpy.version", "library_version"),
    ("python.", "library_version"),
    ("cuda.version", "library_version"),
    ("cuda.cudnn_version", "library_version"),
    ("cuda.driver_version", "library_version"),
    ("platform.libc", "library_version"),
    ("cpu.model", "hardware"),
    ("cuda.", "hardware"),
    ("platform.machine", "hardware"),
    ("variables.CUDA_VISIBLE_DEVICES", "hardware"),
)


def environment_leads(
    baseline: Mapping[str, Any] | None, candidate: Mapping[str, Any] | None
) -> tuple[EnvironmentLead, ...]:
    """Every differing fact of two fingerprints, most likely explanations of drift first.

    Categories in order: simd, precision, threads, determinism, library_version,
    hardware, other; keys in code-point order within a category. When a side
    has no fingerprint, one lead says so.
    """
    if baseline is None or candidate is None:
        missing = "baseline" if baseline is None else "candidate"
        if baseline is None and candidate is None:
            missing = "baseline and candidate"
        return (
            EnvironmentLead(
                key="environment",
                category="other",
                baseline=None if baseline is None else "recorded",
                candidate=None if candidate is None else "recorded",
                note=f"no environment was recorded in the {missing}: no leads can be derived",
            ),
        )
    left, right = _flattened(baseline), _flattened(candidate)
    leads = []
    for key in sorted(set(left) | set(right)):
        before, after = left.get(key), right.get(key)
        if before == after:
            continue
        category = _category(key)
        leads.append(EnvironmentLead(key, category, before, after, _note(category, before, after)))
    return tuple(sorted(leads, key=lambda lead: _CATEGORY_ORDER.index(lead.category)))


def _flattened(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flattened(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


def _category(key: str) -> str:
    for prefix, category in _CATEGORY_PREFIXES:
        if key.startswith(prefix):
            return category
    return "other"


def _note(category: str, before: Any, after: Any) -> str:
    note = _CATEGORY_NOTES[category]
    if isinstance(before, list) and isinstance(after, list):
        only_before = [item for item in before if item not in after]
        only_after = [item for item in after if item not in before]
        parts = []
        if only_before:
            parts.append("only in baseline: " + ", ".join(map(str, only_before)))
        if only_after:
            parts.append("only in candidate: " + ", ".join(map(str, only_after)))
        if parts:
            note += " (" + "; ".join(parts) + ")"
    return note


_CUBLAS_HINT = (
    "CUBLAS_WORKSPACE_CONFIG is unset on a run that uses a GPU: cuBLAS may pick "
    "non-deterministic algorithms (set ':4096:8' with torch.use_deterministic_algorithms(True))"
)
_NOISE = "or judge the runs with NoiseComparison(), which measures this noise (docs/resume.md)"


def nondeterminism_hints(
    environment: Mapping[str, str],
    fingerprints: Sequence[tuple[str, Mapping[str, Any]]] | None = None,
    *,
    device: str | None = None,
) -> tuple[str, ...]:
    """Why runs of one configuration may drift, from what their recorded fingerprints show.

    `fingerprints`: (run, fingerprint) of the runs that part, as their
    recordings hold them (None: not looked up; empty: the runs record none).
    A GPU knob is named only for a run on a GPU (`device` not "cpu" and CUDA
    available in a fingerprint), a thread count only when the fingerprints
    show two, a variable only when the fingerprints differ in it.
    """
    hints: list[str] = []
    recorded = list(fingerprints or ())
    threads = _differing(recorded, "threads", "torch_intra_op")
    if threads:
        hints.append(
            f"the runs took different intra-op thread counts ({threads}, threads.torch_intra_op), "
            "and a CPU reduction splits its work per thread: set one count (in the script, where "
            f"it calls torch.set_num_threads; else OMP_NUM_THREADS) {_NOISE}"
        )
    for variable in ("PYTHONHASHSEED", "CUBLAS_WORKSPACE_CONFIG", "NVIDIA_TF32_OVERRIDE"):
        values = _differing(recorded, "variables", variable)
        if values:
            hints.append(f"the runs differ in {variable} ({values}): set it alike for every run")
    if ran_on_gpu(recorded, device) and "CUBLAS_WORKSPACE_CONFIG" not in environment:
        hints.append(_CUBLAS_HINT)
    if hints:
        return tuple(hints)
    if fingerprints is None:
        return ()
    if not recorded:
        return (
            "the runs recorded no fingerprint: without record() nothing shows the thread count "
            "each took (a script may set it in code, with torch.set_num_threads) nor the step "
            "where they part; call trainparity.record() after every step, then "
            "trainparity.explain reruns them to find the first op that differs",
        )
    return (
        "the runs' recorded fingerprints agree (thread count, CPU dispatch, variables): the "
        "variation is the script's own (an unseeded generator, an order drawn per run); "
        f"trainparity.explain traces the first op where they part, {_NOISE}",
    )


def ran_on_gpu(fingerprints: Sequence[tuple[str, Mapping[str, Any]]], device: str | None) -> bool:
    """Whether runs used a GPU, as far as their fingerprints tell: CUDA initialised in a
    training process at its first record() (its devices read from torch), or a CUDA `device`
    and CUDA available (without fingerprints, the device alone); never for device "cpu"."""
    if device == "cpu":
        return False
    for _, fingerprint in fingerprints:
        devices = (fingerprint.get("cuda") or {}).get("devices") or ()
        if any(isinstance(item, Mapping) and "capability" in item for item in devices):
            return True
    if device is None:
        return False
    return not fingerprints or any(
        (fingerprint.get("cuda") or {}).get("available") for _, fingerprint in fingerprints
    )


def _differing(recorded: Sequence[tuple[str, Mapping[str, Any]]], group: str, key: str) -> str:
    """ "run: value, ..." when the fingerprints hold more than one value of group.key, else ""."""
    values = [(name, (fingerprint.get(group) or {}).get(key)) for name, fingerprint in recorded]
    if len({str(value) for _, value in values}) < 2:
        return ""
    return ", ".join(f"{name}: {value}" for name, value in values)
