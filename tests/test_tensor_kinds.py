"""Every tensor kind torch can make reaches the C-facing entry points safely: a result or UnsupportedStateError.

The probe (tests/fixtures/tensor_kinds_probe.py) runs in a child process with
a one-rank gloo group, so a crash (the SIGSEGV a DTensor's null data pointer
caused before) is seen as the child dying, with the kind and the entry point
it had reached, instead of killing pytest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = Path(__file__).parent / "fixtures" / "tensor_kinds_probe.py"

READ_AS_VALUES = {
    "plain", "parameter", "transposed_view", "strided_slice", "expanded", "zero_stride_scalar",
    "empty", "conj_view", "neg_view", "int64", "bool", "bfloat16", "float8", "inference_mode",
    "function_only_subclass", "dtensor_shard", "dtensor_replicate", "dtensor_uneven",
    "dtensor_parameter", "sharded_tensor",
}  # fmt: skip
UNSUPPORTED = {
    "wrapper_subclass": "__main__.Wrapper",
    "meta": "meta tensor",
    "fake": "FakeTensor",
    "sparse_coo": "layout torch.sparse_coo",
    "sparse_csr": "layout torch.sparse_csr",
    "mkldnn": "layout torch._mkldnn",
    "quantized": "quantized tensor",
    "nested_strided": "nested tensor",
    "nested_jagged": "NestedTensor",
    "uninitialized_parameter": "UninitializedParameter",
    "functional": "functorch wrapper",
    "vmap_batched": "functorch wrapper",
}


@pytest.fixture(scope="module")
def probe_lines(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    root = Path(__file__).parent.parent
    environment["PYTHONPATH"] = str(root) + os.pathsep + environment.get("PYTHONPATH", "")
    completed = subprocess.run(
        [sys.executable, "-m", "tests.fixtures.tensor_kinds_probe"],
        cwd=tmp_path_factory.mktemp("kinds"),
        env=environment,
        capture_output=True,
        text=True,
        timeout=240,
    )
    lines = [json.loads(line) for line in completed.stdout.splitlines() if line.startswith("{")]
    last = lines[-1] if lines else None
    assert completed.returncode == 0, (
        f"the probe died (returncode {completed.returncode}) at {last}:\n{completed.stderr[-3000:]}"
    )
    return lines


def _outcomes(lines: list[dict]) -> dict[str, dict[str, str]]:
    return {line["kind"]: line["outcome"] for line in lines if "outcome" in line}


def test_every_kind_gets_a_result_or_a_clear_error(probe_lines: list[dict]) -> None:
    outcomes = _outcomes(probe_lines)
    assert set(outcomes) == READ_AS_VALUES | set(UNSUPPORTED)
    for kind in READ_AS_VALUES:
        assert set(outcomes[kind].values()) == {"ok"}, (kind, outcomes[kind])
    for kind, named in UNSUPPORTED.items():
        for entry, outcome in outcomes[kind].items():
            # The error names the path and what the tensor is, raised before the C core.
            assert outcome.startswith("unsupported: unsupported state at x: "), (kind, entry)
            assert named in outcome, (kind, entry, outcome)


def test_an_uneven_dtensor_is_its_local_shard_with_its_placement(probe_lines: list[dict]) -> None:
    (facts,) = [line["sharded"] for line in probe_lines if "sharded" in line]
    assert facts["placement"] == {
        "kind": "dtensor",
        "mesh_shape": [1],
        "placements": ["Shard(dim=0)"],
        "coordinate": [0],
        "global_shape": [7, 3],
        "offsets": [0, 0],
    }
    assert facts["local_shape"] == [7, 3]
    outcome, path, reason, first_index, baseline = facts["differing"]
    assert (outcome, path, reason, first_index) == ("FAIL", "x", "tensor_value", 20)
    assert "shard of dtensor mesh 1 [Shard(dim=0)]" in baseline
    assert facts["against_plain"][0] == "tensor_placement"
    assert facts["against_plain"][1] == "not sharded"
    for key in ("snapshot_placement", "snapshot_values_equal"):
        assert facts[key] is True, key
    for key in ("recording_placement", "recording_values_equal"):
        assert facts[key] is True, key
