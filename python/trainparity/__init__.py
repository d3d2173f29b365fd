"""trainparity: differential tests for PyTorch training semantics."""

from trainparity.version import PACKAGE_VERSION as _PACKAGE_VERSION

__version__ = _PACKAGE_VERSION

__all__ = ["__version__"]
