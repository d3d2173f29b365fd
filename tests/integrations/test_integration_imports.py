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
import builtins, sys

real_import = builtins.__import__


def without_libraries(name, *args, **kwargs):
    if name.split(".")[0] in {"transformers", "lightning", "pytorch_lightning", "accelerate"}:
        raise ImportError(f"No module named {name!r}")
    return real_import(name, *args, **kwargs)


builtins.__import__ = without_libraries
import importlib

for module, extra in (("huggingface", "huggingface"), ("lightning", "lightning"), ("accelerate", "accelerate")):
    try:
        importlib.import_module(f"trainparity.integrations.{module}")
    except ImportError as error:
        assert f"pip install 'trainparity[{extra}]'" in str(error), error
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
