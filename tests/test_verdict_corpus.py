"""The verdict corpus's fast subset: real training programs whose verdicts are known.

benchmarks/verdicts.py runs the whole corpus (benchmarks/corpus/); these are
the entries marked `fast`: a clean deterministic resume that must PASS bit for
bit, a clean nondeterministic one that must PASS under NoiseComparison, and
planted faults that must FAIL at the component and step where they first show.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.corpus import FAULT_CLASSES
from benchmarks.verdicts import judge, load_entries

ENTRIES, BROKEN = load_entries()
FAST = [(entry_id, entry) for entry_id, entry in ENTRIES if entry.fast]


def test_every_corpus_module_loads_and_names_known_fault_classes() -> None:
    assert BROKEN == []
    assert all(entry.fault in (None, *FAULT_CLASSES) for _, entry in ENTRIES)


def test_fast_subset_holds_both_clean_forms_and_two_faults() -> None:
    kinds = {(entry.form, entry.fault is None) for _, entry in FAST}
    assert ("deterministic", True) in kinds and ("nondeterministic", True) in kinds
    assert sum(entry.fault is not None for _, entry in FAST) >= 2


@pytest.mark.parametrize(("entry_id", "entry"), FAST, ids=[entry_id for entry_id, _ in FAST])
def test_fast_entry_gets_its_exact_verdict(entry_id: str, entry, tmp_path: Path) -> None:
    verdict = judge(entry_id, entry, entry.run(tmp_path / "work"), seconds=0.0)
    if entry.fault is None:
        assert verdict.outcome == "PASS", verdict.message
        return
    assert verdict.outcome == "FAIL", verdict.message
    assert verdict.path is not None and verdict.path.startswith(entry.expect_path), verdict.message
    assert verdict.step == entry.expect_step, verdict.message
    assert verdict.judgement == "detected"
