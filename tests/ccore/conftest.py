"""The `core` fixture: the native core on its own, so these tests can run under AddressSanitizer.

CI sets TRAINPARITY_CORE_PATH to a sanitizer build of the extension file (see
core_loader.py); these tests never import torch.
"""

from __future__ import annotations

import pytest
from core_loader import load_core


@pytest.fixture(scope="session")
def core():
    return load_core()
