"""The core never imports the libraries; each integration says which extra it needs."""

from __future__ import annotations

import subprocess
import sys

LIBRARIES = ("transformers", "lightning", "pytorch_lightning", "accelerate")

CORE_ONLY = f"""
import sys
import trainparity
from trainparity import Outcome, check_resume

result = check_resume("trainparity.quickstarts.resume:CleanCase", environment={{"OMP_NUM_THREADS": "1"}})
assert result.outcome == Outcome.PASS, result.message
loaded = sorted(name for name in sys.modules if name.split(".")[0] in {LIBRARIES!r})
assert not loaded, loaded
print("core only")
"""

MISSING_LIBRARY = """
import importlib
import importlib.abc
import sys


class WithoutLibraries(importlib.abc.MetaPathFinder):
    \"\"\"As if the libraries were not installed.\"\"\"

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"transformers", "lightning", "pytorch_lightning", "accelerate"}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, WithoutLibraries())
for module in ("huggingface", "lightning", "accelerate"):
    try:
        importlib.import_module(f"trainparity.integrations.{module}")
    except ImportError as error:
        assert f"pip install 'trainparity[{module}]'" in str(error), error
    else:
        raise AssertionError(f"trainparity.integrations.{module} imported without its library")
print("clear errors")
"""


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )


def test_importing_trainparity_and_running_a_check_loads_no_library():
    completed = _python(CORE_ONLY)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "core only"


def test_each_integration_without_its_library_names_the_extra_to_install():
    completed = _python(MISSING_LIBRARY)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "clear errors"
