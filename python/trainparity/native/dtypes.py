"""The tensor dtypes trainparity handles: names, element sizes and safetensors codes."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DtypeInfo:
    """How one torch dtype is named, sized and stored."""

    dtype: torch.dtype
    name: str  # torch name without the "torch." prefix; the native core's dtype name
    element_size: int
    safetensors_code: str | None  # None: stored as raw U8 bytes, real dtype in the manifest
    is_floating: bool  # floating or complex: carries error magnitudes even under exact policy


def _info(name: str, code: str | None) -> DtypeInfo | None:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        return None  # an older torch without this dtype
    return DtypeInfo(
        dtype=dtype,
        name=name,
        element_size=dtype.itemsize,
        safetensors_code=code,
        is_floating=dtype.is_floating_point or dtype.is_complex,
    )


_TABLE = [
    ("bool", "BOOL"),
    ("uint8", "U8"),
    ("int8", "I8"),
    ("int16", "I16"),
    ("int32", "I32"),
    ("int64", "I64"),
    ("uint16", "U16"),
    ("uint32", "U32"),
    ("uint64", "U64"),
    ("float16", "F16"),
    ("bfloat16", "BF16"),
    ("float32", "F32"),
    ("float64", "F64"),
    ("complex32", None),
    ("complex64", "C64"),
    ("complex128", None),
    ("float8_e4m3fn", "F8_E4M3"),
    ("float8_e5m2", "F8_E5M2"),
    ("float8_e4m3fnuz", "F8_E4M3FNUZ"),
    ("float8_e5m2fnuz", "F8_E5M2FNUZ"),
    ("float8_e8m0fnu", None),
]

_BY_DTYPE: dict[torch.dtype, DtypeInfo] = {}
_BY_TEXT: dict[str, DtypeInfo] = {}
for _name, _code in _TABLE:
    _entry = _info(_name, _code)
    if _entry is not None:
        _BY_DTYPE[_entry.dtype] = _entry
        _BY_TEXT[str(_entry.dtype)] = _entry


def info_for_dtype(dtype: torch.dtype) -> DtypeInfo | None:
    """The entry for a torch dtype, or None when trainparity cannot compare it."""
    return _BY_DTYPE.get(dtype)


def info_for_text(text: str) -> DtypeInfo:
    """The entry for a dtype recorded as text (`"torch.float32"`); TypeError if unknown."""
    entry = _BY_TEXT.get(text)
    if entry is None:
        raise TypeError(f"unknown captured dtype {text!r}; supported: {sorted(_BY_TEXT)}")
    return entry
