"""The children find a case module from the directory it is imported from, not from beside it."""

from __future__ import annotations

import sys
import textwrap

import trainparity
from trainparity import Outcome
from trainparity._internal.processes.child_environment import import_root

CASES = """
import sys
from pathlib import Path

import torch

SAVE = "import sys, torch; torch.save({'w': torch.ones(2)}, sys.argv[1])"


class Case:
    name = "packaged"
    split_step = 1
    total_step = 2

    def command(self, plan):
        return [sys.executable, "-c", SAVE, str(plan.run_dir / "state.pt")]

    def checkpoint_path(self, run_dir: Path) -> Path:
        return run_dir / "state.pt"

    def observe_checkpoint(self, path: Path):
        return torch.load(path, weights_only=True)
"""


def test_import_root_of_a_module_in_a_package(tmp_path):
    assert import_root("pkg.sub.cases", tmp_path / "pkg/sub/cases.py") == tmp_path
    assert import_root("pkg", tmp_path / "pkg/__init__.py") == tmp_path
    assert import_root("cases", tmp_path / "cases.py") == tmp_path


def test_a_sibling_named_like_a_library_does_not_hide_it(tmp_path, monkeypatch):
    """`torch.py` beside the case module, inside its package: the children must import torch."""
    package = tmp_path / "shadowing_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "cases.py").write_text(textwrap.dedent(CASES))
    (package / "torch.py").write_text("raise ImportError('the sibling torch.py was imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "shadowing_pkg", raising=False)
    result = trainparity.check_resume(
        "shadowing_pkg.cases:Case", cwd=tmp_path, work_dir=tmp_path / "work"
    )
    assert result.outcome is Outcome.PASS, result.message
