"""Finds the native core to test: the installed one, or a sanitizer build named by TRAINPARITY_CORE_PATH.

A sanitizer build is loaded directly from its file, without importing the
trainparity package (and so torch), which keeps AddressSanitizer runs lean.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os


def load_core():
    path = os.environ.get("TRAINPARITY_CORE_PATH")
    if not path:
        from trainparity import _trainparity

        return _trainparity
    loader = importlib.machinery.ExtensionFileLoader("_trainparity", path)
    spec = importlib.util.spec_from_file_location("_trainparity", path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module
