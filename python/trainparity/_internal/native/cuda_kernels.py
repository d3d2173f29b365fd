"""The CUDA kernels, built and loaded as a torch C++ extension on first use.

This module finds the kernel sources, builds them (or loads the cached build
from TORCH_EXTENSIONS_DIR) the first time a GPU tensor needs them, and records
why they are unavailable when they cannot be built. It holds the one cached
kernel module and failure reason; native/cuda.py dispatches work to them.
"""

from __future__ import annotations

import os
import threading
import warnings
from pathlib import Path
from typing import Any

__all__ = [
    "KERNELS_VARIABLE",
    "build_kernels",
    "kernel_unavailable_reason",
    "kernels_available",
]

# Set to "0" to never build or use the kernels (GPU tensors are then streamed).
KERNELS_VARIABLE = "TRAINPARITY_CUDA_KERNELS"
_EXTENSION_NAME = "trainparity_cuda_kernels"
_SOURCES = ("binding.cpp", "compare.cu", "digest.cu", "summary.cu")
_HEADERS = ("launchers.h", "compare_rules.cuh", "digest_rules.cuh", "summary_rules.cuh")

_kernel_lock = threading.Lock()
_kernel_module: Any = None
_kernel_failure: str | None = None
_kernel_dtype_names: frozenset[str] | None = None


def _sources_directory() -> Path | None:
    """Where the kernel sources are: inside the package when installed (setup.py copies them to
    trainparity/csrc/cuda), else at the root of the source tree (python/trainparity's grandparent)."""
    package = Path(__file__).resolve().parents[2]  # trainparity/, not _internal/native/
    for candidate in (package / "csrc" / "cuda", package.parents[1] / "csrc" / "cuda"):
        if all((candidate / name).is_file() for name in _SOURCES + _HEADERS):
            return candidate
    return None


def _environment_problem() -> str | None:
    import torch

    if os.environ.get(KERNELS_VARIABLE) == "0":
        return f"the CUDA kernels are disabled by {KERNELS_VARIABLE}=0"
    if torch.version.cuda is None:
        return "this torch build has no CUDA support"
    if not torch.cuda.is_available():
        return "CUDA is not available (no GPU or driver)"
    if _sources_directory() is None:
        return "the kernel sources (csrc/cuda) are not installed with this copy of trainparity"
    return None


def build_kernels(*, verbose: bool = False) -> Any:
    """Build (or load from the TORCH_EXTENSIONS_DIR cache) the kernel extension; raise on failure.

    Comparisons call this on their first GPU tensor and fall back to host
    streaming if it fails; call it with verbose=True to build ahead of time
    and see the compiler's output.
    """
    problem = _environment_problem()
    if problem is not None:
        raise RuntimeError(problem)
    # Imported here, not at module import: importing trainparity never compiles anything.
    from torch.utils import cpp_extension

    if cpp_extension.CUDA_HOME is None:
        raise RuntimeError("no CUDA toolkit found (nvcc); set CUDA_HOME to its directory")
    directory = _sources_directory()
    assert directory is not None  # checked by _environment_problem
    return cpp_extension.load(
        name=_EXTENSION_NAME,
        sources=[str(directory / name) for name in _SOURCES],
        extra_include_paths=[str(directory)],
        extra_cflags=["-O2", "-ffp-contract=off"],
        # The sums must be rounded exactly as the C core rounds them: no fused
        # multiply-adds (the kernels also use explicit round-to-nearest intrinsics).
        extra_cuda_cflags=["-O3", "--fmad=false", "-Xcompiler", "-ffp-contract=off"],
        verbose=verbose,
    )


def _kernels() -> Any:
    """The kernel extension, built (or loaded from TORCH_EXTENSIONS_DIR's cache) on first use."""
    global _kernel_module, _kernel_failure
    with _kernel_lock:
        if _kernel_module is None and _kernel_failure is None:
            _kernel_failure = _environment_problem()
            if _kernel_failure is None:
                try:
                    _kernel_module = build_kernels()
                except Exception as error:  # any build failure means: stream instead
                    detail = str(error).strip().splitlines()
                    _kernel_failure = (
                        f"building the CUDA kernels failed ({type(error).__name__}: "
                        f"{detail[0] if detail else 'no message'})"
                    )
                    warnings.warn(
                        f"trainparity: {_kernel_failure}; GPU tensors are compared by "
                        "streaming them to the host",
                        RuntimeWarning,
                        stacklevel=3,
                    )
        return _kernel_module


def kernels_available() -> bool:
    """Whether GPU tensors are compared by the CUDA kernels (builds them on the first call)."""
    return _kernels() is not None


def kernel_unavailable_reason() -> str | None:
    """Why GPU tensors are streamed to the host instead, or None when the kernels are used."""
    _kernels()
    return _kernel_failure


def _kernel_dtypes(module: Any) -> frozenset[str]:
    global _kernel_dtype_names
    if _kernel_dtype_names is None:
        _kernel_dtype_names = frozenset(module.dtypes())
    return _kernel_dtype_names
