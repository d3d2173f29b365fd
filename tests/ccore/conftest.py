"""Loads the native core on its own, so these tests can run under AddressSanitizer.

By default the core of the installed package is used. CI sets
TRAINPARITY_CORE_PATH to a sanitizer build of the extension file; it is then
loaded directly, without importing the trainparity package (and so torch).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os

import pytest


def _load_core():
    path = os.environ.get("TRAINPARITY_CORE_PATH")
    if not path:
        from trainparity import _trainparity

        return _trainparity
    loader = importlib.machinery.ExtensionFileLoader("_trainparity", path)
    spec = importlib.util.spec_from_file_location("_trainparity", path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def core():
    return _load_core()
