"""The CUDA backend on any machine: fallback, host streaming, and the kernels' arithmetic emulated on the host.

Streaming is exercised with CPU tensors wrapped in DeviceTensorBytes: the same
code that streams a GPU tensor's bytes through bounded staging buffers. The
kernels' arithmetic (csrc/cuda/*_rules.cuh) is compiled for the host by
tests/gpu/emulate_kernels.cpp and checked against the C core bit for bit; what
only a GPU can show is in tests/gpu.
"""

from __future__ import annotations

import ctypes
import io
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from trainparity import compare_states
from trainparity._internal.comparison.states import compare_states_with_records
from trainparity._internal.native.core import core, tensor_bytes
from trainparity._internal.native.cuda import (
    BLOCK_ALIGNMENT,
    CPU_BACKEND,
    HOST_STREAM_BACKEND,
    KERNEL_BACKEND,
    DeviceTensorBytes,
    compare_buffers,
    digest_buffer,
    iter_host_blocks,
    summary_buffer,
    write_buffer,
)
from trainparity._internal.native.cuda_kernels import (
    _sources_directory,
    kernel_unavailable_reason,
    kernels_available,
)
from trainparity._internal.state.freeze import FrozenTensor, freeze

from tests.gpu.pairs import (
    CHUNK_ELEMENTS,
    KERNEL_DTYPES,
    MODES,
    overflowing_float64_pair,
    random_pair,
    result_bits,
    special_value_pairs,
)

ROOT = Path(__file__).resolve().parents[1]
ALL_DTYPES = [
    name
    for name in (
        "bool", "uint8", "int8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
        "float16", "bfloat16", "float32", "float64", "complex32", "complex64", "complex128",
        "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
    )
    if isinstance(getattr(torch, name, None), torch.dtype)
]  # fmt: skip


def core_result(name, baseline, candidate, **mode):
    return core.compare(name, tensor_bytes(baseline), tensor_bytes(candidate), **mode)


# ---- fallback and laziness --------------------------------------------------------------


def test_importing_trainparity_builds_nothing():
    script = (
        "import sys, torch, trainparity\n"
        "from trainparity import compare_states\n"
        "compare_states({'w': torch.ones(3)}, {'w': torch.ones(3)})\n"
        "assert 'torch.utils.cpp_extension' not in sys.modules, 'cpp_extension was imported'\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=ROOT)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_without_cuda_the_backend_says_why_and_streams():
    reason = kernel_unavailable_reason()
    assert reason is not None and "CUDA" in reason
    assert not kernels_available()
    baseline, candidate = random_pair("float32", 1000, seed=1)
    _, backend = compare_buffers(
        "float32", DeviceTensorBytes(baseline), DeviceTensorBytes(candidate)
    )
    assert backend == HOST_STREAM_BACKEND


def test_the_kernel_sources_are_found_where_this_copy_of_trainparity_has_them():
    """Installed, setup.py copies csrc/cuda into the package; in a checkout it is at the root.

    A GPU machine builds the kernels from there on first use. The lookup once
    looked beside native/ instead, so every GPU streamed through the host.
    """
    directory = _sources_directory()
    assert directory is not None
    assert (directory / "compare.cu").is_file() and (directory / "binding.cpp").is_file()


def test_disabling_the_kernels_is_reported():
    script = "from trainparity._internal.native import cuda_kernels\nprint(cuda_kernels.kernel_unavailable_reason())\n"
    output = subprocess.run(
        [sys.executable, "-c", script],
        check=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "TRAINPARITY_CUDA_KERNELS": "0"},
    ).stdout
    assert "TRAINPARITY_CUDA_KERNELS=0" in output


def test_backends_that_cannot_apply_are_refused():
    cpu = DeviceTensorBytes(torch.ones(4))
    with pytest.raises(ValueError, match="two buffers on one CUDA device"):
        compare_buffers("float32", cpu, cpu, backend=KERNEL_BACKEND)
    with pytest.raises(ValueError, match="two host buffers"):
        compare_buffers("float32", cpu, cpu, backend=CPU_BACKEND)
    with pytest.raises(ValueError, match="backend must be one of"):
        compare_buffers("float32", cpu, cpu, backend="gpu")
    with pytest.raises(ValueError, match="on a CUDA device"):
        digest_buffer(cpu, backend=KERNEL_BACKEND)
    with pytest.raises(ValueError, match="positive multiple of 524288"):
        compare_buffers("float32", cpu, cpu, backend=HOST_STREAM_BACKEND, block_bytes=1000)


# ---- host streaming: identical to one pass of the C core ---------------------------------


@pytest.mark.parametrize("name", ALL_DTYPES)
@pytest.mark.parametrize("mode", sorted(MODES))
def test_streamed_compare_is_bit_identical_to_the_core(name, mode):
    itemsize = getattr(torch, name).itemsize
    count = (3 * BLOCK_ALIGNMENT + 1000) // itemsize  # three full blocks and a short one
    baseline, candidate = random_pair(name, count, seed=len(name))
    expected = core_result(name, baseline, candidate, **MODES[mode])
    streamed, backend = compare_buffers(
        name,
        DeviceTensorBytes(baseline),
        DeviceTensorBytes(candidate),
        backend=HOST_STREAM_BACKEND,
        block_bytes=BLOCK_ALIGNMENT,
        **MODES[mode],
    )
    assert backend == HOST_STREAM_BACKEND
    assert result_bits(streamed) == result_bits(expected)
    # One side already in host memory (a snapshot file), the other streamed.
    mixed, _ = compare_buffers(
        name,
        tensor_bytes(baseline),
        DeviceTensorBytes(candidate),
        block_bytes=BLOCK_ALIGNMENT,
        **MODES[mode],
    )
    assert result_bits(mixed) == result_bits(expected)


def test_streamed_compare_of_identical_and_empty_buffers():
    values = torch.linspace(-1.0, 1.0, 3 * CHUNK_ELEMENTS)
    same = DeviceTensorBytes(values)
    result, _ = compare_buffers("float32", same, same, block_bytes=BLOCK_ALIGNMENT)
    assert result == (-1, 0, 0.0, 0.0, 0.0)
    empty = DeviceTensorBytes(torch.empty(0))
    assert compare_buffers("float32", empty, empty)[0] == (-1, 0, 0.0, 0.0, 0.0)


@pytest.mark.parametrize("version", core.DIGEST_VERSIONS)
@pytest.mark.parametrize("length", [0, 1, 65536, 3 * BLOCK_ALIGNMENT + 77])
def test_streamed_digest_is_the_core_digest(length, version):
    data = torch.randint(
        0, 256, (length,), dtype=torch.uint8, generator=torch.Generator().manual_seed(length)
    )
    digest, backend = digest_buffer(
        DeviceTensorBytes(data),
        backend=HOST_STREAM_BACKEND,
        block_bytes=BLOCK_ALIGNMENT,
        version=version,
    )
    assert backend == HOST_STREAM_BACKEND
    assert digest == core.digest(tensor_bytes(data), version=version)
    assert digest_buffer(tensor_bytes(data), version=version) == (digest, CPU_BACKEND)
    if version == core.DIGEST_VERSION:
        assert digest_buffer(tensor_bytes(data)) == (digest, CPU_BACKEND)


def test_digest_versions_differ_and_default_to_the_newest():
    data = tensor_bytes(torch.arange(1000, dtype=torch.float32))
    assert core.DIGEST_VERSION == 2
    by_version = {version: digest_buffer(data, version=version)[0] for version in (1, 2)}
    assert by_version[1] != by_version[2]
    assert digest_buffer(data)[0] == by_version[2]


@pytest.mark.parametrize("backend", [None, CPU_BACKEND, HOST_STREAM_BACKEND, KERNEL_BACKEND])
@pytest.mark.parametrize("version", [0, 3, None, "2", True, 2.0])
def test_unknown_digest_versions_are_refused_on_every_backend(backend, version):
    data = torch.ones(4)
    source = tensor_bytes(data) if backend == CPU_BACKEND else DeviceTensorBytes(data)
    with pytest.raises(ValueError, match=r"supported digest versions \(1, 2\)"):
        digest_buffer(source, backend=backend, version=version)


SUMMARISED_DTYPES = [name for name in KERNEL_DTYPES if name in ALL_DTYPES]


def summary_bits(state: tuple) -> tuple:
    """A summary state with its floats as bit patterns (NaN sums compare equal)."""
    floats = [struct.unpack("<Q", struct.pack("<d", value))[0] for value in state[1:4]]
    return (state[0], *floats, *state[4:])


@pytest.mark.parametrize("name", SUMMARISED_DTYPES)
def test_summary_buffer_is_the_core_digest_and_summary_on_every_host_backend(name):
    itemsize = getattr(torch, name).itemsize
    count = (3 * BLOCK_ALIGNMENT + 1000) // itemsize  # three full blocks and a short one
    values, _ = random_pair(name, count, seed=len(name))
    host = tensor_bytes(values)
    expected = (core.digest(host), summary_bits(core.summary(name, host)))
    digest, state, backend = summary_buffer(name, host)
    assert (digest, summary_bits(state), backend) == (*expected, CPU_BACKEND)
    digest, state, backend = summary_buffer(
        name, DeviceTensorBytes(values), backend=HOST_STREAM_BACKEND, block_bytes=BLOCK_ALIGNMENT
    )
    assert (digest, summary_bits(state), backend) == (*expected, HOST_STREAM_BACKEND)


@pytest.mark.parametrize("version", core.DIGEST_VERSIONS)
def test_summary_buffer_of_empty_buffers_and_older_digest_versions(version):
    for data in (torch.empty(0), torch.arange(70000, dtype=torch.float32)):
        host = tensor_bytes(data)
        expected = (core.digest(host, version=version), core.summary("float32", host))
        for source in (host, DeviceTensorBytes(data)):
            digest, state, _ = summary_buffer("float32", source, version=version)
            assert (digest, state) == expected
    with pytest.raises(ValueError, match=r"supported digest versions \(1, 2\)"):
        summary_buffer("float32", b"", version=3)
    with pytest.raises(ValueError, match="on a CUDA device"):
        summary_buffer("float32", b"", backend=KERNEL_BACKEND)


def test_streaming_holds_at_most_two_bounded_staging_buffers(monkeypatch):
    allocations = []
    real_empty = torch.empty

    def recording_empty(*args, **kwargs):
        tensor = real_empty(*args, **kwargs)
        allocations.append(tensor.numel() * tensor.element_size())
        return tensor

    monkeypatch.setattr(torch, "empty", recording_empty)
    data = torch.arange(5 * BLOCK_ALIGNMENT // 4, dtype=torch.float32)
    blocks = [len(block) for block in iter_host_blocks(DeviceTensorBytes(data), BLOCK_ALIGNMENT)]
    assert blocks == [BLOCK_ALIGNMENT] * 5
    assert allocations == [BLOCK_ALIGNMENT, BLOCK_ALIGNMENT]


def test_write_buffer_writes_the_bytes_of_every_kind_of_buffer():
    data = torch.randn(3 * BLOCK_ALIGNMENT // 4 + 3)
    for source in (DeviceTensorBytes(data), tensor_bytes(data)):
        stream = io.BytesIO()
        write_buffer(stream, source, block_bytes=BLOCK_ALIGNMENT)
        assert stream.getvalue() == bytes(tensor_bytes(data))


def test_device_tensor_bytes_slices_and_views():
    tensor = torch.tensor([[1.0, 2.0], [3.0, 4.0]]).t()  # not contiguous
    data = DeviceTensorBytes(tensor)
    assert len(data) == 16
    assert data[4:8] == struct.pack("<f", 3.0)
    assert data[100:200] == b""
    with pytest.raises(TypeError, match="contiguous slices"):
        data[::2]
    frozen = FrozenTensor((2, 2), "torch.float32", "cpu", False, data)
    assert frozen.value_at(1) == 3.0
    assert frozen.leading_values() == [1.0, 3.0, 2.0, 4.0]
    assert torch.equal(frozen.to_tensor(), tensor)


def test_cpu_comparisons_say_the_cpu_backend_ran():
    _, records = compare_states_with_records({"w": torch.ones(3)}, {"w": torch.zeros(3)})
    assert [record.values.backend for record in records] == [CPU_BACKEND]
    assert (
        compare_states({"w": torch.ones(3)}, {"w": torch.zeros(3)}).tensors[0].mismatch_count == 3
    )


def test_freezing_cpu_tensors_without_copy_still_views_them():
    tensor = torch.arange(4.0)
    frozen = freeze({"t": tensor}, copy=False).as_dict()["t"]
    assert isinstance(frozen.data, memoryview)
    tensor[0] = 9.0  # a view of the live tensor, not a copy
    assert frozen.value_at(0) == 9.0


# ---- the kernels' arithmetic, emulated on the host ------------------------------------


class _Result(ctypes.Structure):
    _fields_ = [
        ("first_mismatch_index", ctypes.c_int64),
        ("mismatch_count", ctypes.c_uint64),
        ("max_abs_error", ctypes.c_double),
        ("max_rel_error", ctypes.c_double),
        ("relative_rms_error", ctypes.c_double),
    ]


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler to build the kernel emulation")
    library = tmp_path_factory.mktemp("emulator") / "emulate_kernels.so"
    subprocess.run(
        [
            compiler, "-O2", "-std=c++17", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror",
            "-shared", "-fPIC", f"-I{ROOT / 'csrc' / 'cuda'}",
            str(ROOT / "tests" / "gpu" / "emulate_kernels.cpp"), "-o", str(library),
        ],
        check=True,
    )  # fmt: skip
    emulation = ctypes.CDLL(str(library))
    emulation.tp_emulate_compare.argtypes = [
        ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
        ctypes.c_double, ctypes.c_double, ctypes.c_int, ctypes.POINTER(_Result),
    ]  # fmt: skip
    emulation.tp_emulate_digest.argtypes = [
        ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p,
    ]  # fmt: skip
    emulation.tp_emulate_summary.argtypes = [
        ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(_Summary),
    ]  # fmt: skip
    return emulation


class _Summary(ctypes.Structure):
    _fields_ = [
        ("count", ctypes.c_uint64),
        ("sum", ctypes.c_double),
        ("sum_squares", ctypes.c_double),
        ("max_abs", ctypes.c_double),
        ("nan_count", ctypes.c_uint64),
        ("inf_count", ctypes.c_uint64),
    ]


def emulated_compare(emulation, name, baseline, candidate, rtol=None, atol=None, equal_nan=False):
    result = _Result()
    status = emulation.tp_emulate_compare(
        name.encode(), baseline.data_ptr(), candidate.data_ptr(), baseline.numel(),
        rtol is not None, rtol or 0.0, atol or 0.0, equal_nan, ctypes.byref(result),
    )  # fmt: skip
    assert status == 0
    return (
        result.first_mismatch_index,
        result.mismatch_count,
        result.max_abs_error,
        result.max_rel_error,
        result.relative_rms_error,
    )


@pytest.mark.parametrize("name", KERNEL_DTYPES)
@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("count", [1, 67, CHUNK_ELEMENTS, 2 * CHUNK_ELEMENTS + 13])
def test_kernel_arithmetic_matches_the_core(emulator, name, mode, count):
    baseline, candidate = random_pair(name, count, seed=count)
    expected = core_result(name, baseline, candidate, **MODES[mode])
    got = emulated_compare(emulator, name, baseline, candidate, **MODES[mode])
    assert result_bits(got) == result_bits(expected)
    same = emulated_compare(emulator, name, baseline, baseline.clone(), **MODES[mode])
    assert result_bits(same) == result_bits(core_result(name, baseline, baseline, **MODES[mode]))


@pytest.mark.parametrize("mode", sorted(MODES))
def test_kernel_arithmetic_on_special_values(emulator, mode):
    for name, baseline, candidate in special_value_pairs():
        expected = core_result(name, baseline, candidate, **MODES[mode])
        got = emulated_compare(emulator, name, baseline, candidate, **MODES[mode])
        assert result_bits(got) == result_bits(expected), name


def test_kernel_arithmetic_rescales_an_overflowing_chunk_among_others(emulator):
    values, changed = overflowing_float64_pair()
    expected = core_result("float64", values, changed)
    assert result_bits(emulated_compare(emulator, "float64", values, changed)) == result_bits(
        expected
    )


@pytest.mark.parametrize("version", core.DIGEST_VERSIONS)
@pytest.mark.parametrize("length", [0, 1, 63, 64, 65, 65536, 65537, 3 * 65536 + 5, 300_001])
def test_kernel_digest_arithmetic_matches_the_core(emulator, version, length):
    data = bytes(torch.randint(0, 256, (length,), dtype=torch.uint8).tolist())
    out = ctypes.create_string_buffer(16)
    assert emulator.tp_emulate_digest(version, data, length, out) == 0
    assert out.raw == core.digest(data, version=version)


def test_kernel_digest_arithmetic_refuses_unknown_versions(emulator):
    assert emulator.tp_emulate_digest(3, b"abc", 3, ctypes.create_string_buffer(16)) == -1


@pytest.mark.parametrize("name", SUMMARISED_DTYPES)
@pytest.mark.parametrize("count", [0, 5, CHUNK_ELEMENTS * 5 + 3])
def test_kernel_summary_arithmetic_matches_the_core(emulator, name, count):
    values, _ = random_pair(name, count, seed=count + len(name))
    found = _Summary()
    assert emulator.tp_emulate_summary(name.encode(), values.data_ptr(), count, found) == 0
    emulated = tuple(getattr(found, field) for field, _ in _Summary._fields_)
    assert summary_bits(emulated) == summary_bits(core.summary(name, tensor_bytes(values)))
    assert emulator.tp_emulate_summary(b"complex64", values.data_ptr(), count, found) == -1
