"""Runs the examples of docs/coverage.md, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("numpy")

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "coverage.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.DOTALL | re.MULTILINE)


def test_the_guide_has_examples_for_each_section():
    blocks = python_blocks(GUIDE.read_text())
    assert len(blocks) >= 6
    assert any("audit_rank_arrays" in block for block in blocks)


def test_guide_examples_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the guide writes its files into the working directory
    namespace = {"__name__": "coverage_guide"}
    for number, block in enumerate(python_blocks(GUIDE.read_text())):
        exec(compile(block, f"{GUIDE.name} block {number}", "exec"), namespace)
