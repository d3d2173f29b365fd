"""The native core, and zero-copy byte views of CPU tensors for it."""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

import trainparity._trainparity as core

if TYPE_CHECKING:
    import torch

__all__ = ["core", "tensor_bytes"]


def tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """A read-only byte view of a contiguous CPU tensor's elements, without copying.

    torch tensors do not export the buffer protocol, so the view is built over
    the data pointer with ctypes; the view keeps the tensor alive.
    """
    if tensor.device.type != "cpu" or not tensor.is_contiguous():
        raise ValueError("tensor_bytes needs a contiguous CPU tensor; call contiguous_cpu first")
    nbytes = tensor.numel() * tensor.element_size()
    if nbytes == 0:
        return memoryview(b"")
    address = tensor.data_ptr()
    if address == 0:  # no plain memory behind it (state/tensor_kinds.py keeps such tensors away)
        raise ValueError("tensor_bytes needs a tensor with plain memory; its data pointer is null")
    array = (ctypes.c_char * nbytes).from_address(address)
    array.owner = tensor  # the memoryview holds `array`, which holds the tensor
    return memoryview(array).cast("B").toreadonly()
