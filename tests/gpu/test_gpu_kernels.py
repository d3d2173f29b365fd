"""On a CUDA GPU: the kernels give the C core's results and digests bit for bit, whatever the launch shape.

Skipped without CUDA. Where CUDA is available but the kernels cannot be built
(no nvcc, no ninja) the kernel tests skip with the reason, unless
TRAINPARITY_REQUIRE_CUDA_KERNELS=1 (set by tests/gpu/run_device_checks.sh),
which turns that into a failure.
"""

from __future__ import annotations

import math
import os

import pytest
import torch
from trainparity import compare_states
from trainparity._internal.comparison.policies import ExactComparison, collect_differences
from trainparity._internal.comparison.states import compare_states_with_records
from trainparity._internal.native.core import core, tensor_bytes
from trainparity._internal.native.cuda import (
    BLOCK_ALIGNMENT,
    HOST_STREAM_BACKEND,
    KERNEL_BACKEND,
    DeviceTensorBytes,
    compare_buffers,
    digest_buffer,
    summary_buffer,
)
from trainparity._internal.native.cuda_kernels import kernel_unavailable_reason, kernels_available
from trainparity._internal.state.freeze import freeze
from trainparity._internal.state.snapshot_file import read_snapshot, write_snapshot
from trainparity.testing import assert_parity

from tests.gpu.pairs import (
    CHUNK_ELEMENTS,
    KERNEL_DTYPES,
    MODES,
    overflowing_float64_pair,
    random_pair,
    result_bits,
    special_value_pairs,
)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

LAUNCH_SHAPES = [(32, 1), (64, 7), (96, 3), (128, 0), (256, 1), (256, 0)]


@pytest.fixture(scope="module", autouse=True)
def kernels():
    if not kernels_available():
        message = f"the CUDA kernels are unavailable: {kernel_unavailable_reason()}"
        if os.environ.get("TRAINPARITY_REQUIRE_CUDA_KERNELS") == "1":
            pytest.fail(message)
        pytest.skip(message)


def on_gpu(tensor: torch.Tensor) -> DeviceTensorBytes:
    return DeviceTensorBytes(tensor.cuda())


def all_three(name, baseline, candidate, launch_shape=(0, 0), **mode):
    """The same comparison by the C core on the host, the kernels, and host streaming."""
    expected = core.compare(name, tensor_bytes(baseline), tensor_bytes(candidate), **mode)
    gpu_a, gpu_b = on_gpu(baseline), on_gpu(candidate)
    kernel, backend = compare_buffers(name, gpu_a, gpu_b, launch_shape=launch_shape, **mode)
    assert backend == KERNEL_BACKEND
    streamed, backend = compare_buffers(
        name, gpu_a, gpu_b, backend=HOST_STREAM_BACKEND, block_bytes=BLOCK_ALIGNMENT, **mode
    )
    assert backend == HOST_STREAM_BACKEND
    return expected, kernel, streamed


@pytest.mark.parametrize("name", KERNEL_DTYPES)
@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("count", [1, 67, CHUNK_ELEMENTS, 3 * CHUNK_ELEMENTS + 13, 1 << 21])
def test_kernel_equals_the_core_and_the_stream(name, mode, count):
    baseline, candidate = random_pair(name, count, seed=count + len(name))
    expected, kernel, streamed = all_three(name, baseline, candidate, **MODES[mode])
    assert result_bits(kernel) == result_bits(expected)
    assert result_bits(streamed) == result_bits(expected)
    same = baseline.clone()
    expected, kernel, _ = all_three(name, baseline, same, **MODES[mode])
    assert result_bits(kernel) == result_bits(expected)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_kernel_special_values(mode):
    for name, baseline, candidate in special_value_pairs():
        expected, kernel, streamed = all_three(name, baseline, candidate, **MODES[mode])
        assert result_bits(kernel) == result_bits(expected), name
        assert result_bits(streamed) == result_bits(expected), name


def test_kernel_rescales_overflowing_float64_chunks():
    expected, kernel, _ = all_three("float64", *overflowing_float64_pair())
    assert result_bits(kernel) == result_bits(expected)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_identical_nan_buffers_have_zero_magnitudes(mode):
    nans = torch.full((2 * CHUNK_ELEMENTS + 5,), math.nan)
    expected, kernel, _ = all_three("float32", nans, nans.clone(), **MODES[mode])
    assert result_bits(kernel) == result_bits(expected)
    assert kernel[2:] == (0.0, 0.0, 0.0)


@pytest.mark.parametrize("name", ["uint8", "float16", "float32", "float64"])
@pytest.mark.parametrize("offset", [1, 3])
def test_unaligned_tensors(name, offset):
    # Views that start `offset` elements into their storage: no vector loads.
    baseline, candidate = random_pair(name, 3 * CHUNK_ELEMENTS + offset, seed=offset)
    gpu_a, gpu_b = baseline.cuda()[offset:], candidate.cuda()[offset:]
    expected = core.compare(
        name,
        tensor_bytes(baseline[offset:].contiguous()),
        tensor_bytes(candidate[offset:].contiguous()),
    )
    kernel, backend = compare_buffers(name, DeviceTensorBytes(gpu_a), DeviceTensorBytes(gpu_b))
    assert backend == KERNEL_BACKEND
    assert result_bits(kernel) == result_bits(expected)


@pytest.mark.parametrize("name", ["bfloat16", "float32", "float64", "int32"])
@pytest.mark.parametrize("mode", ["exact", "tolerance"])
def test_results_do_not_depend_on_the_launch_shape(name, mode):
    baseline, candidate = random_pair(name, 40 * CHUNK_ELEMENTS + 77, seed=7)
    gpu_a, gpu_b = on_gpu(baseline), on_gpu(candidate)
    results = {
        shape: result_bits(
            compare_buffers(name, gpu_a, gpu_b, launch_shape=shape, **MODES[mode])[0]
        )
        for shape in LAUNCH_SHAPES
    }
    assert len(set(results.values())) == 1, results
    expected = core.compare(name, tensor_bytes(baseline), tensor_bytes(candidate), **MODES[mode])
    assert next(iter(results.values())) == result_bits(expected)


@pytest.mark.parametrize("version", core.DIGEST_VERSIONS)
@pytest.mark.parametrize("length", [0, 1, 63, 64, 65536, 65537, 3 * 65536 + 5, (8 << 20) + 3])
@pytest.mark.parametrize("offset", [0, 1, 8])
def test_kernel_digest_is_the_core_digest(version, length, offset):
    data = torch.randint(0, 256, (length + offset,), dtype=torch.uint8)
    expected = core.digest(tensor_bytes(data[offset:].contiguous()), version=version)
    device_bytes = DeviceTensorBytes(data.cuda()[offset:])
    for shape in [(0, 0), (32, 1), (256, 3)]:
        digest, backend = digest_buffer(device_bytes, launch_shape=shape, version=version)
        assert (digest, backend) == (expected, KERNEL_BACKEND)
    streamed, _ = digest_buffer(
        device_bytes, backend=HOST_STREAM_BACKEND, block_bytes=BLOCK_ALIGNMENT, version=version
    )
    assert streamed == expected
    if version == core.DIGEST_VERSION:
        assert digest_buffer(device_bytes)[0] == expected


def _summary_bits(state: tuple) -> tuple:
    """A summary state with its floats as exact hex text (NaN sums compare equal)."""
    return (state[0], *(value.hex() for value in state[1:4]), *state[4:])


@pytest.mark.parametrize("name", KERNEL_DTYPES)
@pytest.mark.parametrize("count", [0, 3, 5 * CHUNK_ELEMENTS + 11])
def test_kernel_summary_is_the_core_digest_and_summary(name, count):
    values, _ = random_pair(name, count, seed=count + 1)
    host = tensor_bytes(values)
    expected = (core.digest(host), _summary_bits(core.summary(name, host)))
    device_bytes = on_gpu(values)
    for shape in [(0, 0), (32, 1), (64, 7), (256, 3)]:
        digest, state, backend = summary_buffer(name, device_bytes, launch_shape=shape)
        assert (digest, _summary_bits(state), backend) == (*expected, KERNEL_BACKEND)


def test_kernel_refuses_unknown_digest_versions():
    with pytest.raises(ValueError, match="supported digest versions"):
        digest_buffer(on_gpu(torch.ones(4)), version=3)


def _state(device: str) -> dict:
    generator = torch.Generator().manual_seed(3)
    weight = torch.randn(300, 700, generator=generator)
    return {
        "model": {
            "weight": weight.to(device),
            "half": weight.to(torch.bfloat16).to(device),
            "steps": torch.arange(10).to(device),
        },
        "step": 4,
    }


def test_compare_states_on_the_gpu_equals_the_cpu():
    baseline_cpu, candidate_cpu = _state("cpu"), _state("cpu")
    candidate_cpu["model"]["weight"][17, 5] += 1e-3
    candidate_cpu["model"]["half"][0, 0] = 7.0
    cpu_result, cpu_records = compare_states_with_records(baseline_cpu, candidate_cpu)
    gpu_baseline = _state("cuda")
    gpu_candidate = {
        "model": {key: value.cuda() for key, value in candidate_cpu["model"].items()},
        "step": 4,
    }
    gpu_result, gpu_records = compare_states_with_records(gpu_baseline, gpu_candidate)
    assert {record.values.backend for record in gpu_records} == {KERNEL_BACKEND}
    assert [r.path for r in gpu_records] == [r.path for r in cpu_records]
    for gpu, cpu in zip(gpu_result.tensors, cpu_result.tensors, strict=True):
        assert (gpu.mismatch_count, gpu.first_mismatch_index) == (
            cpu.mismatch_count,
            cpu.first_mismatch_index,
        )
        assert result_bits((gpu.max_abs_error, gpu.max_rel_error, gpu.relative_rms_error)) == (
            result_bits((cpu.max_abs_error, cpu.max_rel_error, cpu.relative_rms_error))
        )
    assert [d.path for d in gpu_result.differences] == [d.path for d in cpu_result.differences]
    with pytest.raises(AssertionError) as gpu_error:
        assert_parity(gpu_baseline, gpu_candidate)
    with pytest.raises(AssertionError) as cpu_error:
        assert_parity(baseline_cpu, candidate_cpu)
    assert str(gpu_error.value) == str(cpu_error.value).replace("device=cpu", "device=cuda:0")
    assert compare_states(gpu_baseline, _state("cuda")).equal


def test_snapshots_of_gpu_state_match_those_of_the_same_cpu_state(tmp_path):
    gpu_info = write_snapshot(tmp_path / "gpu.safetensors", _state("cuda"), step=4)
    cpu_info = write_snapshot(tmp_path / "cpu.safetensors", _state("cpu"), step=4)
    assert gpu_info.tensor_bytes == cpu_info.tensor_bytes
    gpu_snapshot, _ = read_snapshot(gpu_info.path)
    cpu_snapshot, _ = read_snapshot(cpu_info.path)
    gpu_model = gpu_snapshot.state.as_dict()["model"].as_dict()
    cpu_model = cpu_snapshot.state.as_dict()["model"].as_dict()
    for key, leaf in gpu_model.items():
        assert leaf.device == "cuda:0"
        assert leaf.digest == cpu_model[key].digest == core.digest(leaf.data)
        assert bytes(leaf.data) == bytes(cpu_model[key].data)
    # A live GPU state against its own snapshot: host bytes against device bytes, streamed.
    records = []
    differences = collect_differences(
        ExactComparison(),
        gpu_snapshot.state,
        freeze(_state("cuda"), copy=False),
        on_tensor=records.append,
    )
    assert differences == ()
    assert {record.values.backend for record in records} == {HOST_STREAM_BACKEND}
