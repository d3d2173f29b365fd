"""Environment leads: the facts that differ between two fingerprints, most likely causes of drift first.

Each difference is a lead to check, not a cause: it is sorted into a category
(SIMD, precision, threads, determinism, library version, hardware, other) with
a note on how such a difference changes results. The fingerprints themselves
are taken by environment.py. Where there is one environment and no second to
compare (two runs of one configuration that drift), `nondeterminism_hints`
names the usual causes it leaves open.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["EnvironmentLead", "environment_leads", "nondeterminism_hints"]


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


# Environment variables whose absence or value commonly explains run-to-run drift.
# (Not OMP_NUM_THREADS: every child runs with a thread count the check decides.)
_NONDETERMINISM_VARIABLES = {
    "CUBLAS_WORKSPACE_CONFIG": "CUBLAS_WORKSPACE_CONFIG is unset: cuBLAS may pick non-deterministic algorithms (set ':4096:8' with torch.use_deterministic_algorithms(True))",
    "PYTHONHASHSEED": "PYTHONHASHSEED is unset: str hashes, and so set/dict iteration over str, differ per process",
}


def nondeterminism_hints(environment: Mapping[str, str]) -> tuple[str, ...]:
    """Why runs may drift, for each such variable that the children's environment lacks."""
    return tuple(
        hint for variable, hint in _NONDETERMINISM_VARIABLES.items() if variable not in environment
    )
