"""The tensor dtypes trainparity handles: names, element sizes and safetensors codes.

The table is plain data, so reading and comparing snapshot files never
imports torch (a check's own process stays torch-free); `DtypeInfo.dtype`
imports torch when a caller holds tensors. tests/test_native_dtypes.py
checks every entry against torch's own dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class DtypeInfo:
    """How one torch dtype is named, sized and stored."""

    name: str  # torch name without the "torch." prefix; the native core's dtype name
    element_size: int
    safetensors_code: str | None  # None: stored as raw U8 bytes, real dtype in the manifest
    is_floating: bool  # floating or complex: carries error magnitudes even under exact policy

    @property
    def dtype(self) -> torch.dtype:
        import torch

        return getattr(torch, self.name)


# (name, safetensors code, element size, floating or complex)
_TABLE = [
    ("bool", "BOOL", 1, False),
    ("uint8", "U8", 1, False),
    ("int8", "I8", 1, False),
    ("int16", "I16", 2, False),
    ("int32", "I32", 4, False),
    ("int64", "I64", 8, False),
    ("uint16", "U16", 2, False),
    ("uint32", "U32", 4, False),
    ("uint64", "U64", 8, False),
    ("float16", "F16", 2, True),
    ("bfloat16", "BF16", 2, True),
    ("float32", "F32", 4, True),
    ("float64", "F64", 8, True),
    ("complex32", None, 4, True),
    ("complex64", "C64", 8, True),
    ("complex128", None, 16, True),
    ("float8_e4m3fn", "F8_E4M3", 1, True),
    ("float8_e5m2", "F8_E5M2", 1, True),
    ("float8_e4m3fnuz", "F8_E4M3FNUZ", 1, True),
    ("float8_e5m2fnuz", "F8_E5M2FNUZ", 1, True),
    ("float8_e8m0fnu", None, 1, True),
]

_BY_TEXT = {
    f"torch.{name}": DtypeInfo(name, size, code, floating) for name, code, size, floating in _TABLE
}


def info_for_dtype(dtype: torch.dtype) -> DtypeInfo | None:
    """The entry for a torch dtype, or None when trainparity cannot compare it."""
    return _BY_TEXT.get(str(dtype))


def info_for_text(text: str) -> DtypeInfo:
    """The entry for a dtype recorded as text (`"torch.float32"`); TypeError if unknown."""
    entry = _BY_TEXT.get(text)
    if entry is None:
        raise TypeError(f"unknown captured dtype {text!r}; supported: {sorted(_BY_TEXT)}")
    return entry
