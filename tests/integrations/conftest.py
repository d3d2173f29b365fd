"""The integration example project, copied once per test session; one thread per child."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "integrations"
# Children run one thread each: the checks start several at once on a small machine.
CHILD_ENVIRONMENT = {
    "OMP_NUM_THREADS": "1",
    "PYTHONHASHSEED": "0",
    "TOKENIZERS_PARALLELISM": "false",
}


@pytest.fixture(scope="session")
def project(tmp_path_factory) -> Path:
    """A copy of docs/examples/integrations, importable (its cases) from this process."""
    target = tmp_path_factory.mktemp("integrations") / "project"
    shutil.copytree(EXAMPLE, target, ignore=shutil.ignore_patterns("__pycache__", "out", "runs"))
    sys.path.insert(0, str(target))
    yield target
    sys.path.remove(str(target))
