"""The native core, and zero-copy byte views of CPU tensors for it."""

from __future__ import annotations

import ctypes

from trainparity import _trainparity as core

__all__ = ["core", "tensor_bytes"]


def tensor_bytes(tensor):  # type: (object) -> memoryview
    """A read-only byte view of a contiguous CPU tensor's storage; the caller keeps it alive.

    torch tensors do not export the buffer protocol, so the view is built over
    the tensor's data pointer with ctypes; no bytes are copied.
    """
    nbytes = tensor.numel() * tensor.element_size()
    if nbytes == 0:
        return memoryview(b"")
    array = (ctypes.c_char * nbytes).from_address(tensor.data_ptr())
    return memoryview(array).cast("B").toreadonly()
