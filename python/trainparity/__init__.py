"""trainparity: differential tests for PyTorch training semantics."""

from trainparity.api import (
    ExactComparison,
    Outcome,
    ToleranceComparison,
    check_resume,
    compare_states,
)
from trainparity.version import PACKAGE_VERSION as _PACKAGE_VERSION

__version__ = _PACKAGE_VERSION

__all__ = [
    "ExactComparison",
    "Outcome",
    "ToleranceComparison",
    "__version__",
    "check_resume",
    "compare_states",
]
