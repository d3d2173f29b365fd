"""Why two runs of one configuration may drift: the usual causes the children's environment leaves open."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["nondeterminism_hints"]

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
