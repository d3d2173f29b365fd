"""Environment fingerprint: the host, library and flag facts that can explain numeric drift.

Every check, snapshot, recording and trace carries one, taken where the
training ran; why/environment_leads.py turns the differences between two of them
into leads.
"""

from __future__ import annotations

import importlib
import os
import platform
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

__all__ = [
    "ALLOWED_VARIABLES",
    "FINGERPRINT_VERSION",
    "environment_fingerprint",
    "machine_fingerprint",
    "recorded_variables",
    "usable_cores",
]

FINGERPRINT_VERSION = 1

# The only environment variables whose values are ever recorded. Everything else
# in the environment (tokens, paths, user names) stays out of snapshots and reports.
ALLOWED_VARIABLES = (
    "CUBLAS_WORKSPACE_CONFIG",
    "CUDA_VISIBLE_DEVICES",
    "MKL_NUM_THREADS",
    "NPY_DISABLE_CPU_FEATURES",
    "NPY_ENABLE_CPU_FEATURES",
    "NVIDIA_TF32_OVERRIDE",
    "OMP_NUM_THREADS",
    "PYTHONHASHSEED",
)

# CPU feature flags that change which vectorised kernels run (and so summation
# order and FMA use); /proc/cpuinfo spelling, x86 then Arm.
_SIMD_FLAGS = (
    "sse2",
    "sse3",
    "ssse3",
    "sse4_1",
    "sse4_2",
    "avx",
    "f16c",
    "fma",
    "avx2",
    "avx_vnni",
    "avx512f",
    "avx512dq",
    "avx512cd",
    "avx512bw",
    "avx512vl",
    "avx512ifma",
    "avx512vbmi",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "asimdhp",
    "asimddp",
    "bf16",
    "i8mm",
    "sve",
    "sve2",
)

_CPUINFO = Path("/proc/cpuinfo")
_NVIDIA_PROC = Path("/proc/driver/nvidia")


def environment_fingerprint(
    *, variables: Mapping[str, str] | None = None, initialize_cuda: bool = False
) -> dict[str, Any]:
    """A JSON-able description of this process's numeric environment, keys sorted at every level.

    `variables` is the environment whose allow-listed variables are recorded
    (default: os.environ; check_resume passes its children's environment).
    Only the variables in ALLOWED_VARIABLES appear, as their value or None
    when unset. GPU details come from the NVIDIA driver's /proc files, and
    from torch only where CUDA is already initialised in this process, unless
    `initialize_cuda=True` (a standalone command may pay for that; a training
    parent should not get a CUDA context as a side effect).
    """
    source = os.environ if variables is None else variables
    fingerprint = {
        "fingerprint_version": FINGERPRINT_VERSION,
        "python": {
            "implementation": platform.python_implementation(),
            "version": platform.python_version(),
        },
        "platform": _platform(),
        "cpu": _cpu(),
        "threads": _threads(),
        "torch": _torch(),
        "cuda": _cuda(initialize_cuda),
        "determinism": _determinism(),
        "precision": _precision(),
        "numpy": _numpy(),
        "variables": recorded_variables(source),
    }
    return _sorted(fingerprint)


def recorded_variables(source: Mapping[str, str]) -> dict[str, str | None]:
    """The fingerprint's `variables`: each allow-listed variable's value in `source`, or None."""
    return {name: source.get(name) for name in ALLOWED_VARIABLES}


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _sorted(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted(item) for item in value]
    return value


def _platform() -> dict[str, Any]:
    libc_name, libc_version = platform.libc_ver()
    return {
        "system": platform.system(),
        "release": platform.release(),
        "machine": platform.machine(),
        "libc": f"{libc_name} {libc_version}" if libc_name else None,
    }


def _cpuinfo_fields() -> dict[str, str]:
    """The first processor's `key: value` lines of /proc/cpuinfo (empty where there is none)."""
    try:
        text = _CPUINFO.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, separator, value = line.partition(":")
        if separator:
            fields.setdefault(key.strip(), value.strip())
    return fields


def _cpu() -> dict[str, Any]:
    return {**_cpu_hardware(), "torch_capability": _torch_cpu_capability()}


def _cpu_hardware() -> dict[str, Any]:
    fields = _cpuinfo_fields()
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    if "pni" in flags:  # Linux names SSE3 "pni" (Prescott New Instructions)
        flags.add("sse3")
    model = fields.get("model name") or fields.get("Model") or platform.processor() or None
    return {
        "model": model,
        "logical_cores": os.cpu_count(),
        "simd": [flag for flag in _SIMD_FLAGS if flag in flags] if flags else None,
    }


def machine_fingerprint() -> dict[str, Any]:
    """The fingerprint's fields that identify the machine (platform, CPU, GPUs, driver).

    Read without importing torch: the baseline cache keys on it before any child runs.
    """
    return _sorted(
        {
            "platform": _platform(),
            "cpu": _cpu_hardware(),
            "gpus": _nvidia_proc_gpu_names(),
            "nvidia_driver_version": _nvidia_driver_version(),
        }
    )


def _torch_cpu_capability() -> str | None:
    """The vector ISA torch's CPU kernels dispatch to here (e.g. "AVX2", "AVX512", "DEFAULT")."""
    import torch

    getter = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)
    return str(getter()) if getter is not None else None


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity where the OS has one, else all."""
    affinity = getattr(os, "sched_getaffinity", None)
    if affinity is not None:
        return max(1, len(affinity(0)))
    return max(1, os.cpu_count() or 1)


def _threads() -> dict[str, Any]:
    import torch

    return {
        "torch_intra_op": torch.get_num_threads(),
        "torch_inter_op": torch.get_num_interop_threads(),
        "usable_cores": usable_cores(),
    }


def _torch() -> dict[str, Any]:
    import torch

    return {
        "version": torch.__version__,
        "git_version": getattr(torch.version, "git_version", None),
        "debug": bool(getattr(torch.version, "debug", False)),
        "hip": getattr(torch.version, "hip", None),
        "mkl": torch.backends.mkl.is_available(),
        "mkldnn": torch.backends.mkldnn.is_available(),
        "openmp": torch.backends.openmp.is_available(),
    }


def _cuda(initialize: bool) -> dict[str, Any]:
    import torch

    available = torch.cuda.is_available()
    details = {
        "available": available,
        "version": torch.version.cuda,
        "cudnn_version": torch.backends.cudnn.version()
        if torch.backends.cudnn.is_available()
        else None,
        "driver_version": _nvidia_driver_version(),
        "device_count": torch.cuda.device_count() if available else 0,
        "devices": _devices(available and (initialize or torch.cuda.is_initialized())),
    }
    return details


def _devices(from_torch: bool) -> list[dict[str, Any]]:
    import torch

    if from_torch:
        devices = []
        for index in range(torch.cuda.device_count()):
            properties = torch.cuda.get_device_properties(index)
            devices.append(
                {
                    "name": properties.name,
                    "capability": f"{properties.major}.{properties.minor}",
                    "memory_bytes": int(properties.total_memory),
                    "multiprocessors": int(properties.multi_processor_count),
                }
            )
        return devices
    return [{"name": name} for name in _nvidia_proc_gpu_names()]


def _nvidia_driver_version() -> str | None:
    try:
        text = (_NVIDIA_PROC / "version").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    match = re.search(r"Kernel Module(?: for [^ ]+)?\s+([0-9][0-9.]*)", text)
    return match.group(1) if match else None


def _nvidia_proc_gpu_names() -> list[str]:
    """GPU model names from the driver's /proc entries, in bus order (no CUDA context needed)."""
    names = []
    try:
        entries = sorted((_NVIDIA_PROC / "gpus").iterdir())
    except OSError:
        return []
    for entry in entries:
        try:
            text = (entry / "information").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        match = re.search(r"^Model:\s*(.+)$", text, flags=re.MULTILINE)
        if match:
            names.append(match.group(1).strip())
    return names


def _determinism() -> dict[str, Any]:
    import torch

    cudnn = torch.backends.cudnn
    return {
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "deterministic_algorithms_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "cudnn_enabled": bool(cudnn.enabled),
        "cudnn_benchmark": bool(cudnn.benchmark),
        "cudnn_deterministic": bool(cudnn.deterministic),
    }


def _precision() -> dict[str, Any]:
    """Process-wide settings that change how floating-point results are rounded."""
    import torch

    matmul = torch.backends.cuda.matmul
    return {
        "default_dtype": str(torch.get_default_dtype()),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda_matmul_allow_tf32": bool(matmul.allow_tf32),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "cuda_matmul_allow_fp16_reduced_precision_reduction": bool(
            matmul.allow_fp16_reduced_precision_reduction
        ),
        "cuda_matmul_allow_bf16_reduced_precision_reduction": bool(
            matmul.allow_bf16_reduced_precision_reduction
        ),
    }


def _numpy() -> dict[str, Any] | None:
    """NumPy's version and SIMD targets, or None where NumPy is not installed."""
    try:
        import numpy
    except ImportError:
        return None
    umath = _numpy_multiarray_umath()
    features = getattr(umath, "__cpu_features__", None) or {}
    return {
        "version": numpy.__version__,
        "simd_baseline": list(getattr(umath, "__cpu_baseline__", None) or []),
        "simd_dispatched": [
            target
            for target in getattr(umath, "__cpu_dispatch__", None) or []
            if features.get(target)
        ],
    }


def _numpy_multiarray_umath() -> Any:
    """NumPy's compiled core module, which reports its SIMD build (it moved in NumPy 2)."""
    for name in ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None
