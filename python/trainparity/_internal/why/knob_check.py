"""Whether a knob a rerun set really took: read back from the fingerprints the reruns recorded.

A rerun sets a knob through the environment, but a script can set the same
thing in code (`torch.set_num_threads(2)` overrides OMP_NUM_THREADS=1). Each
recording's head holds the environment fingerprint its process took at its
first `record()` (environment.py): torch's intra-op thread count, the CPU
dispatch torch chose, the allow-listed variables as the process saw them.
A knob is judged against those facts:

- `TOOK`: every fingerprint shows the value the rerun set;
- `OVERRIDDEN`: some fingerprint shows another value: the script sets it,
  so no rerun from outside can pin it (a lead is then "not controllable
  from outside", never "ruled out");
- `UNSEEN`: no fingerprint records it (a variable the fingerprint does not
  keep): that the rerun set it is all that is known.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from trainparity._internal.recording.phase_recordings import recording_directory
from trainparity._internal.recording.reader import read_recordings

__all__ = [
    "OVERRIDDEN",
    "TOOK",
    "UNSEEN",
    "knob_took",
    "phase_fingerprints",
    "recorded_fingerprints",
    "thread_counts",
]

TOOK, OVERRIDDEN, UNSEEN = "took", "overridden", "unseen"

# torch sizes its intra-op pool from MKL_NUM_THREADS over OMP_NUM_THREADS (processes/threads.py).
_THREAD_VARIABLES = ("MKL_NUM_THREADS", "OMP_NUM_THREADS")


def recorded_fingerprints(directories: Iterable[Path]) -> list[tuple[str, Mapping[str, Any]]]:
    """(rerun name, fingerprint) of every rank recorded in `directories` (their names kept)."""
    found = []
    for directory in directories:
        if not directory.is_dir():
            continue
        for rank, recording in read_recordings(directory, trust_digests=True).items():
            if recording.environment is not None:
                name = directory.name if rank == 0 else f"{directory.name} rank {rank}"
                found.append((name, recording.environment))
    return found


def knob_took(
    values: Mapping[str, str], fingerprints: Sequence[tuple[str, Mapping[str, Any]]]
) -> tuple[str, str]:
    """(TOOK, OVERRIDDEN or UNSEEN, the evidence in words) for knob `values` set on every
    process whose fingerprints are given."""
    facts = _expected_facts(values)
    if not facts or not fingerprints:
        shown = ", ".join(sorted(values))
        return UNSEEN, f"the recorded fingerprints do not keep {shown}"
    overridden, unseen = [], []
    for key, expected, setting in facts:
        for name, fingerprint in fingerprints:
            actual = _fact(fingerprint, key, _MISSING)
            if actual is _MISSING:
                unseen.append(key)
            elif str(actual).lower() != expected.lower():
                overridden.append(f"{name} recorded {key}={actual} under {setting}")
    if overridden:
        return OVERRIDDEN, "; ".join(overridden)
    if unseen:
        return UNSEEN, f"the recorded fingerprints do not keep {', '.join(sorted(set(unseen)))}"
    keys = ", ".join(sorted({key for key, _, _ in facts}))
    return TOOK, f"every rerun's fingerprint shows it ({keys})"


def thread_counts(fingerprints: Sequence[tuple[str, Mapping[str, Any]]]) -> list[int]:
    """The intra-op thread counts the fingerprints recorded, in order (None left out)."""
    counts = [_fact(fingerprint, "threads.torch_intra_op") for _, fingerprint in fingerprints]
    return [int(count) for count in counts if count is not None]


def phase_fingerprints(run_root: Path, names: Iterable[str]) -> list[tuple[str, Mapping[str, Any]]]:
    """The fingerprints the named children of a check recorded (none where they record none)."""
    return recorded_fingerprints(recording_directory(run_root, name) for name in names)


def _expected_facts(values: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """(fingerprint key, the value it must show, the setting that asks for it) per variable."""
    facts = []
    threads = next((name for name in _THREAD_VARIABLES if values.get(name) is not None), None)
    if threads is not None:
        setting = " ".join(
            f"{name}={values[name]}" for name in sorted(_THREAD_VARIABLES) if values.get(name)
        )
        facts.append(("threads.torch_intra_op", str(values[threads]), setting))
    for name, value in sorted(values.items()):
        if value is None or name in _THREAD_VARIABLES:
            continue
        if name == "ATEN_CPU_CAPABILITY":
            facts.append(("cpu.torch_capability", str(value), f"{name}={value}"))
        else:
            facts.append((f"variables.{name}", str(value), f"{name}={value}"))
    return facts


_MISSING = object()


def _fact(fingerprint: Mapping[str, Any], key: str, missing: Any = None) -> Any:
    """A dotted key of a fingerprint; `missing` where it has none (a variable it does not keep;
    an allow-listed variable the process had unset is there, as None)."""
    node: Any = fingerprint
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return missing
        node = node[part]
    return node
