"""The environment knobs `explain` can set on a rerun, and the ones it cannot test on this machine.

A knob is an environment variable a training process reads at start (or a
group of them that only make sense together). `explain` compares the two
sides' effective environments: each knob that differs is a lead, and a
rerun with that knob at the other side's value tests it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["DETERMINISM_KNOBS", "Knob", "SETTABLE_KNOBS", "differing_knobs", "untestable_leads"]


@dataclass(frozen=True)
class Knob:
    """One knob: its name in the report and the variables it sets together."""

    name: str
    variables: tuple[str, ...]
    gpu_only: bool = False


SETTABLE_KNOBS = (
    Knob("threads", ("OMP_NUM_THREADS", "MKL_NUM_THREADS")),
    Knob("ATEN_CPU_CAPABILITY", ("ATEN_CPU_CAPABILITY",)),
    Knob("NPY_DISABLE_CPU_FEATURES", ("NPY_DISABLE_CPU_FEATURES",)),
    Knob("MKL_CBWR", ("MKL_CBWR",)),
    Knob("ONEDNN_MAX_CPU_ISA", ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")),
    Knob("PYTHONHASHSEED", ("PYTHONHASHSEED",)),
    Knob("CUBLAS_WORKSPACE_CONFIG", ("CUBLAS_WORKSPACE_CONFIG",), gpu_only=True),
    Knob("NVIDIA_TF32_OVERRIDE", ("NVIDIA_TF32_OVERRIDE",), gpu_only=True),
)

# What explain tries when both sides share one environment (two repeats part): each
# pins a source of run-to-run variation to one value on both sides.
_BY_NAME = {knob.name: knob for knob in SETTABLE_KNOBS}
DETERMINISM_KNOBS = (
    (_BY_NAME["threads"], {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}),
    (_BY_NAME["MKL_CBWR"], {"MKL_CBWR": "COMPATIBLE"}),
    (_BY_NAME["PYTHONHASHSEED"], {"PYTHONHASHSEED": "0"}),
    (_BY_NAME["CUBLAS_WORKSPACE_CONFIG"], {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}),
)

_UNSETTABLE_PREFIXES = (
    ("cpu.", "hardware"),
    ("cuda.", "a GPU or its driver"),
    ("versions.", "another library version"),
    ("python.", "another Python"),
    ("torch.", "another torch build"),
    ("numpy.", "NumPy's build or this CPU's features"),
)


def differing_knobs(
    first: Mapping[str, str], second: Mapping[str, str]
) -> list[tuple[Knob, dict[str, str | None], dict[str, str | None]]]:
    """Each knob whose variables differ between two environments: (knob, A's, B's).

    The known knobs first, in table order; then every other variable that
    differs, as a knob of its own (any variable can be set on a rerun, and
    one the script never reads is ruled out by that rerun).
    """
    found = []
    covered: set[str] = set()
    for knob in SETTABLE_KNOBS:
        covered.update(knob.variables)
        left = {name: first.get(name) for name in knob.variables}
        right = {name: second.get(name) for name in knob.variables}
        if left != right:
            found.append((knob, left, right))
    for name in sorted((set(first) | set(second)) - covered):
        if first.get(name) != second.get(name) and not name.startswith("TRAINPARITY_"):
            found.append((Knob(name, (name,)), {name: first.get(name)}, {name: second.get(name)}))
    return found


def untestable_leads(leads: object) -> list[tuple[str, str, str, str]]:
    """(key, A, B, why) of fingerprint leads no variable sets: hardware, builds, versions."""
    rows = []
    for lead in leads or ():  # type: ignore[attr-defined]
        key = getattr(lead, "key", "")
        if key.startswith("variables."):
            continue  # an environment variable: a knob above, or one no rerun needs
        why = next((text for prefix, text in _UNSETTABLE_PREFIXES if key.startswith(prefix)), None)
        if why is not None:
            rows.append((key, str(lead.baseline), str(lead.candidate), why))
    return rows
