"""GPU tensors compared and digested where they live: CUDA kernels built on first use, else host streaming."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, BinaryIO

from trainparity._internal.native.core import core, tensor_bytes
from trainparity._internal.native.cuda_kernels import (
    _kernel_dtypes,
    _kernels,
    kernel_unavailable_reason,
    kernels_available,
)

if TYPE_CHECKING:
    import torch

__all__ = [
    "CPU_BACKEND",
    "HOST_BLOCK_BYTES",
    "HOST_STREAM_BACKEND",
    "KERNEL_BACKEND",
    "CompareResult",
    "DeviceTensorBytes",
    "compare_buffers",
    "core_threads",
    "digest_buffer",
    "iter_host_blocks",
    "summary_buffer",
    "write_buffer",
]

KERNEL_BACKEND = "cuda-kernel"
HOST_STREAM_BACKEND = "host-stream"
CPU_BACKEND = "cpu"
_BACKENDS = (KERNEL_BACKEND, HOST_STREAM_BACKEND, CPU_BACKEND)

# (first_mismatch_index, mismatch_count, max_abs_error, max_rel_error, relative_rms_error)
CompareResult = tuple[int, int, float, float, float]
# (count, sum, sum_squares, max_abs, nan_count, inf_count), as core.summary returns it
SummaryState = tuple[int, float, float, float, int, int]

# Host memory used to stream one device buffer: two staging buffers of this size,
# whatever the tensor's size. Blocks must hold whole compare chunks (32768
# elements, up to 16 bytes each) and whole digest chunks (65536 bytes).
HOST_BLOCK_BYTES = 32 << 20
BLOCK_ALIGNMENT = 32768 * 16

# Below this size a single thread of the native core is faster than starting more.
_PARALLEL_MIN_BYTES = 8 << 20


def core_threads(nbytes: int) -> int:
    """Threads for one native-core pass (compare or digest) over `nbytes` bytes."""
    if nbytes < _PARALLEL_MIN_BYTES:
        return 1
    return max(1, min(os.cpu_count() or 1, 8))


class DeviceTensorBytes:
    """The element bytes of a live tensor, left where the tensor lives and read on demand.

    `FrozenTensor.data` of a CUDA tensor frozen with `copy=False`: comparisons
    and digests run on the device (or stream the bytes to the host in bounded
    blocks), so a GPU state is never copied whole to the host. Slicing returns
    the bytes of a small range as `bytes` (for summaries and messages). The
    tensor must not change until the comparison that uses this is done.
    """

    def __init__(self, tensor: torch.Tensor) -> None:
        flat = tensor.detach().resolve_conj().resolve_neg().contiguous().reshape(-1)
        self.tensor = flat
        self.nbytes = flat.numel() * flat.element_size()

    @property
    def device(self) -> torch.device:
        return self.tensor.device

    def __len__(self) -> int:
        return self.nbytes

    def __repr__(self) -> str:
        return f"DeviceTensorBytes({self.nbytes} bytes on {self.device})"

    def byte_view(self) -> torch.Tensor:
        """The elements as a flat uint8 tensor on the tensor's device (no copy)."""
        import torch

        return self.tensor.view(torch.uint8)

    def __getitem__(self, key: slice) -> bytes:
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError("DeviceTensorBytes supports only contiguous slices, e.g. data[8:16]")
        start, stop, _ = key.indices(self.nbytes)
        if stop <= start:
            return b""
        return bytes(tensor_bytes(self.byte_view()[start:stop].to("cpu")))

    def host_blocks(self, block_bytes: int) -> Iterator[memoryview]:
        """Consecutive blocks of the bytes as host memory, through two reused staging buffers.

        The copy of block k+1 is started before block k is handed out, so the
        transfer overlaps the caller's work on block k. A yielded view is only
        valid until the next one is requested.
        """
        import torch

        if self.nbytes == 0:
            return
        source = self.byte_view()
        on_cuda = source.is_cuda
        size = min(block_bytes, self.nbytes)
        count = -(-self.nbytes // block_bytes)
        staging = [
            torch.empty(size, dtype=torch.uint8, pin_memory=on_cuda) for _ in range(min(count, 2))
        ]
        guard = torch.cuda.device(source.device) if on_cuda else contextlib.nullcontext()
        with guard:

            def start_copy(index: int) -> tuple[torch.Tensor, Any]:
                begin = index * block_bytes
                end = min(self.nbytes, begin + block_bytes)
                target = staging[index % 2][: end - begin]
                target.copy_(source[begin:end], non_blocking=on_cuda)
                if not on_cuda:
                    return target, None
                done = torch.cuda.Event()
                done.record()
                return target, done

            pending = start_copy(0)
            for index in range(count):
                target, done = pending
                if index + 1 < count:
                    pending = start_copy(index + 1)
                if done is not None:
                    done.synchronize()
                yield tensor_bytes(target)


def iter_host_blocks(data: Any, block_bytes: int = HOST_BLOCK_BYTES) -> Iterator[memoryview]:
    """Consecutive blocks of a tensor's element bytes as host memory, at most `block_bytes` each.

    Host buffers (memoryview, mmap slices) are sliced without copying; a
    DeviceTensorBytes is copied block by block through bounded staging buffers.
    """
    if isinstance(data, DeviceTensorBytes):
        yield from data.host_blocks(block_bytes)
        return
    view = memoryview(data).cast("B")
    for start in range(0, len(view), block_bytes):
        yield view[start : start + block_bytes]


# Comparison and digests ----------------------------------------------------------------


def _required_kernels() -> Any:
    module = _kernels()
    if module is None:
        raise RuntimeError(
            f"the {KERNEL_BACKEND} backend is unavailable: {kernel_unavailable_reason()}"
        )
    return module


def compare_buffers(
    dtype_name: str,
    baseline: Any,
    candidate: Any,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    equal_nan: bool = False,
    backend: str | None = None,
    launch_shape: tuple[int, int] = (0, 0),
    block_bytes: int = HOST_BLOCK_BYTES,
) -> tuple[CompareResult, str]:
    """The native compare result for two element buffers, and which backend produced it.

    Buffers are host buffers or DeviceTensorBytes. By default two buffers on
    one CUDA device go to the kernels when they handle the dtype and can be
    built; anything else involving a device buffer streams through the C core
    in blocks of `block_bytes`; two host buffers use the C core directly. All
    three give bit-identical results. `backend` forces one ("cuda-kernel",
    "host-stream", "cpu" — the last only for host buffers), and
    `launch_shape` = (block_threads, grid_blocks) sets the kernels' launch (0 =
    automatic; it never changes a result).
    """
    chosen = _choose_backend(dtype_name, baseline, candidate, backend)
    mode = {"rtol": rtol, "atol": atol, "equal_nan": equal_nan}
    if chosen == KERNEL_BACKEND:
        import torch  # the kernels run on tensors: torch is loaded already

        module = _required_kernels()
        with torch.cuda.device(baseline.device):
            stream = torch.cuda.current_stream(baseline.device).cuda_stream
            result = module.compare(
                baseline.tensor, candidate.tensor, dtype_name, rtol, atol, equal_nan, stream,
                *launch_shape,
            )  # fmt: skip
        return tuple(result), KERNEL_BACKEND  # type: ignore[return-value]
    if chosen == HOST_STREAM_BACKEND:
        return _compare_streamed(dtype_name, baseline, candidate, mode, block_bytes), chosen
    threads = core_threads(len(baseline))
    return core.compare(dtype_name, baseline, candidate, threads=threads, **mode), CPU_BACKEND


def _choose_backend(dtype_name: str, baseline: Any, candidate: Any, backend: str | None) -> str:
    on_device = [isinstance(data, DeviceTensorBytes) for data in (baseline, candidate)]
    if backend is not None:
        if backend not in _BACKENDS:
            raise ValueError(f"backend must be one of {_BACKENDS} or None, got {backend!r}")
        if backend == KERNEL_BACKEND and not (
            all(on_device) and _same_cuda_device(baseline, candidate)
        ):
            raise ValueError(f"the {KERNEL_BACKEND} backend needs two buffers on one CUDA device")
        if backend == CPU_BACKEND and any(on_device):
            raise ValueError(f"the {CPU_BACKEND} backend needs two host buffers")
        return backend
    if not any(on_device):
        return CPU_BACKEND
    if all(on_device) and _same_cuda_device(baseline, candidate):
        module = _kernels()
        if module is not None and dtype_name in _kernel_dtypes(module):
            return KERNEL_BACKEND
    return HOST_STREAM_BACKEND


def _same_cuda_device(baseline: DeviceTensorBytes, candidate: DeviceTensorBytes) -> bool:
    return baseline.device.type == "cuda" and baseline.device == candidate.device


def _check_block_bytes(block_bytes: int) -> None:
    if block_bytes <= 0 or block_bytes % BLOCK_ALIGNMENT != 0:
        raise ValueError(
            f"block_bytes must be a positive multiple of {BLOCK_ALIGNMENT}, got {block_bytes}"
        )


def _compare_streamed(
    dtype_name: str, baseline: Any, candidate: Any, mode: dict, block_bytes: int
) -> CompareResult:
    _check_block_bytes(block_bytes)
    if len(baseline) != len(candidate):
        raise ValueError(
            f"baseline and candidate must have the same byte length, got {len(baseline)} and {len(candidate)} bytes"
        )
    state = core.compare_accumulate(dtype_name, b"", b"", **mode)
    for baseline_block, candidate_block in zip(
        iter_host_blocks(baseline, block_bytes),
        iter_host_blocks(candidate, block_bytes),
        strict=True,
    ):
        state = core.compare_accumulate(
            dtype_name,
            baseline_block,
            candidate_block,
            state,
            threads=core_threads(len(baseline_block)),
            **mode,
        )
    return core.compare_finish(state)


def digest_buffer(
    data: Any,
    *,
    backend: str | None = None,
    launch_shape: tuple[int, int] = (0, 0),
    block_bytes: int = HOST_BLOCK_BYTES,
    version: int = core.DIGEST_VERSION,
) -> tuple[bytes, str]:
    """The native core's 16-byte digest of a buffer's bytes, and which backend produced it.

    A DeviceTensorBytes on a CUDA device is digested by the kernel when it can
    be built, else streamed to the host in blocks; a host buffer goes to the C
    core directly. The digest is the same whichever runs. `version` is the
    digest version (one of core.DIGEST_VERSIONS; e.g. a snapshot's recorded
    `digest_version`), else ValueError.
    """
    _check_version(version)
    backend = _single_buffer_backend(data, backend)
    if backend == KERNEL_BACKEND:
        import torch  # the kernels run on tensors: torch is loaded already

        module = _required_kernels()
        with torch.cuda.device(data.device):
            stream = torch.cuda.current_stream(data.device).cuda_stream
            digest = module.digest(data.tensor, stream, *launch_shape, version=version)
            return digest, KERNEL_BACKEND
    if backend == HOST_STREAM_BACKEND:
        _check_block_bytes(block_bytes)
        chunk_digests = bytearray()
        for block_index, block in enumerate(iter_host_blocks(data, block_bytes)):
            first_chunk = block_index * (block_bytes // core.DIGEST_CHUNK_BYTES)
            chunk_digests += core.digest_chunks(
                block, first_chunk=first_chunk, threads=core_threads(len(block)), version=version
            )
        return core.digest_root(chunk_digests, len(data), version=version), HOST_STREAM_BACKEND
    return core.digest(data, threads=core_threads(len(data)), version=version), CPU_BACKEND


def summary_buffer(
    dtype_name: str,
    data: Any,
    *,
    backend: str | None = None,
    launch_shape: tuple[int, int] = (0, 0),
    block_bytes: int = HOST_BLOCK_BYTES,
    version: int = core.DIGEST_VERSION,
) -> tuple[bytes, SummaryState, str]:
    """A buffer's 16-byte digest and its summary statistics in one pass, and which backend ran.

    The digest is `digest_buffer`'s and the statistics `core.summary`'s, bit for
    bit, whichever backend runs: the CUDA kernel for a buffer on a CUDA device
    (when the kernels can be built), else host blocks of whole chunks streamed
    through the C core's fused pass; a host buffer goes to the fused pass
    directly. `dtype_name` is one the C core summarises (core.summary's).
    """
    _check_version(version)
    backend = _single_buffer_backend(data, backend)
    if backend == KERNEL_BACKEND:
        import torch  # the kernels run on tensors: torch is loaded already

        module = _required_kernels()
        with torch.cuda.device(data.device):
            stream = torch.cuda.current_stream(data.device).cuda_stream
            digest, state = module.digest_summary(
                data.tensor, dtype_name, stream, *launch_shape, version=version
            )
            return digest, tuple(state), KERNEL_BACKEND  # type: ignore[return-value]
    if backend == HOST_STREAM_BACKEND:
        _check_block_bytes(block_bytes)
        chunk_digests = bytearray()
        state = None
        for block in iter_host_blocks(data, block_bytes):
            digests, state = core.digest_summary_chunks(
                dtype_name, block, state, threads=core_threads(len(block)), version=version
            )
            chunk_digests += digests
        if state is None:  # an empty buffer has no blocks
            state = core.summary(dtype_name, b"")
        digest = core.digest_root(chunk_digests, len(data), version=version)
        return digest, state, HOST_STREAM_BACKEND
    threads = core_threads(len(data))
    digest, state = core.digest_summary(dtype_name, data, threads=threads, version=version)
    return digest, state, CPU_BACKEND


def _check_version(version: int) -> None:
    if type(version) is not int or version not in core.DIGEST_VERSIONS:
        raise ValueError(
            f"digest version must be one of the supported digest versions "
            f"{core.DIGEST_VERSIONS}, got {version!r}"
        )


def _single_buffer_backend(data: Any, backend: str | None) -> str:
    """The backend for a pass over one buffer: the one asked for if it can run, else the best."""
    on_cuda = isinstance(data, DeviceTensorBytes) and data.device.type == "cuda"
    if backend is None:
        if not isinstance(data, DeviceTensorBytes):
            return CPU_BACKEND
        return KERNEL_BACKEND if on_cuda and kernels_available() else HOST_STREAM_BACKEND
    if backend not in _BACKENDS:
        raise ValueError(f"backend must be one of {_BACKENDS} or None, got {backend!r}")
    if backend == KERNEL_BACKEND and not on_cuda:
        raise ValueError(f"the {KERNEL_BACKEND} backend needs a buffer on a CUDA device")
    if backend == CPU_BACKEND and isinstance(data, DeviceTensorBytes):
        raise ValueError(f"the {CPU_BACKEND} backend needs a host buffer")
    return backend


def write_buffer(stream: BinaryIO, data: Any, block_bytes: int = HOST_BLOCK_BYTES) -> None:
    """Write a buffer's bytes to a binary file, at most `block_bytes` of host memory at a time."""
    for block in iter_host_blocks(data, block_bytes):
        stream.write(block)
