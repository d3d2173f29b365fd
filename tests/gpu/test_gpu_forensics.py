"""Forensics on a GPU: one step traced on the CPU and on CUDA, digested where the tensors live, then diffed."""

from __future__ import annotations

import pytest
import torch
import trainparity
from trainparity import Outcome
from trainparity._internal.why.forensics import diff_traces
from trainparity._internal.why.forensics.capture import measure_tensor

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _step_trace(device: str):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.Linear(256, 1)
    ).to(device)
    batch = torch.randn(512, 256).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def step():
        model(batch).softmax(dim=0).square().sum().backward()
        optimizer.step()

    return trainparity.trace(model=model, inputs={"batch": batch}, keep=("2",), run=step)


def test_gpu_digest_and_summary_match_the_cpu():
    values = torch.randn(3, 70_001, dtype=torch.float32)
    values[0, 5] = float("nan")
    values[1, 7] = float("inf")
    cpu, gpu = measure_tensor(values), measure_tensor(values.cuda())
    assert gpu.digest == cpu.digest
    assert (gpu.count, gpu.nan_count, gpu.inf_count) == (cpu.count, 1, 1)
    assert gpu.max_abs == cpu.max_abs
    assert gpu.sum == pytest.approx(cpu.sum, rel=1e-9, abs=1e-9)
    assert gpu.l2_norm == pytest.approx(cpu.l2_norm, rel=1e-12)


def test_cpu_against_cuda_parts_at_an_op_born_on_the_gpu():
    cpu, cuda = _step_trace("cpu"), _step_trace("cuda")
    assert {cuda.values[index].device for op in cuda.ops for index in op.outputs} == {"cuda:0"}
    assert all(tensor.is_cuda for tensor in cuda.kept.values())
    diff = diff_traces(cpu, cuda)
    assert diff.outcome is Outcome.FAIL, diff.message
    first = diff.first_divergence
    # The parameters and batch are the same bytes on both devices: it is born in an op.
    assert first["origin"] == "born", diff.message
    assert first["op_kind"] in ("matmul", "reduction", "elementwise")
    # Both traces come from this one process: their fingerprints differ in `cuda.*` only when
    # CUDA was first initialised between them, which depends on the tests that ran before
    # (on the H200 an earlier test had initialised it, and there were no leads). The device
    # is in the ops instead.
    assert {cpu.values[index].device for op in cpu.ops for index in op.outputs} == {"cpu"}
    print(diff.message, first["relative_error"])
