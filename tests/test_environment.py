"""The environment fingerprint: content, determinism, the variable allow-list, and drift leads."""

from __future__ import annotations

import json
import os
import uuid

import pytest
import torch
from trainparity._internal import environment
from trainparity._internal.environment import ALLOWED_VARIABLES, environment_fingerprint
from trainparity._internal.why.environment_leads import environment_leads


def _keys_sorted_everywhere(value) -> bool:
    if isinstance(value, dict):
        return list(value) == sorted(value) and all(
            _keys_sorted_everywhere(item) for item in value.values()
        )
    if isinstance(value, list):
        return all(_keys_sorted_everywhere(item) for item in value)
    return True


def test_fingerprint_is_json_with_sorted_keys_and_the_same_on_every_call():
    first = environment_fingerprint()
    assert json.loads(json.dumps(first)) == first
    assert _keys_sorted_everywhere(first)
    assert json.dumps(environment_fingerprint()) == json.dumps(first)


def test_fingerprint_names_libraries_hardware_and_thread_counts():
    fingerprint = environment_fingerprint()
    assert fingerprint["torch"]["version"] == torch.__version__
    assert fingerprint["python"]["version"].count(".") == 2
    assert fingerprint["threads"]["torch_intra_op"] == torch.get_num_threads()
    assert fingerprint["cpu"]["logical_cores"] == os.cpu_count()
    assert fingerprint["cpu"]["torch_capability"] == torch.backends.cpu.get_cpu_capability()
    assert fingerprint["cuda"]["available"] == torch.cuda.is_available()
    numpy = pytest.importorskip("numpy")
    assert fingerprint["numpy"]["version"] == numpy.__version__
    assert isinstance(fingerprint["numpy"]["simd_baseline"], list)


def test_flags_are_read_from_torch_at_call_time():
    threads = torch.get_num_threads()
    try:
        torch.use_deterministic_algorithms(True)
        torch.set_num_threads(1)
        torch.set_default_dtype(torch.float64)
        fingerprint = environment_fingerprint()
    finally:
        torch.use_deterministic_algorithms(False)
        torch.set_num_threads(threads)
        torch.set_default_dtype(torch.float32)
    assert fingerprint["determinism"]["deterministic_algorithms"] is True
    assert fingerprint["threads"]["torch_intra_op"] == 1
    assert fingerprint["precision"]["default_dtype"] == "torch.float64"
    assert fingerprint["precision"]["float32_matmul_precision"] == (
        torch.get_float32_matmul_precision()
    )


def test_only_allow_listed_variables_are_recorded_and_unset_ones_are_none():
    secret = f"s3cr3t-{uuid.uuid4()}"
    variables = {"OMP_NUM_THREADS": "3", "TRAINPARITY_TEST_TOKEN": secret, "HOME": secret}
    fingerprint = environment_fingerprint(variables=variables)
    assert fingerprint["variables"] == {
        name: ("3" if name == "OMP_NUM_THREADS" else None) for name in ALLOWED_VARIABLES
    }
    assert secret not in json.dumps(fingerprint)


def test_variables_default_to_the_process_environment(monkeypatch):
    secret = f"s3cr3t-{uuid.uuid4()}"
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    monkeypatch.setenv("TRAINPARITY_TEST_TOKEN", secret)
    fingerprint = environment_fingerprint()
    assert fingerprint["variables"]["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert secret not in json.dumps(fingerprint)


def test_simd_features_come_from_cpuinfo_on_x86_and_arm(monkeypatch, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    monkeypatch.setattr(environment, "_CPUINFO", cpuinfo)
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: Example CPU\nflags\t\t: fpu pni sse2 avx2 fma avx512f\n\n"
        "processor\t: 1\nmodel name\t: Other\nflags\t\t: sse2\n"
    )
    cpu = environment_fingerprint()["cpu"]
    assert cpu["model"] == "Example CPU"
    assert cpu["simd"] == ["sse2", "sse3", "fma", "avx2", "avx512f"]
    cpuinfo.write_text("processor\t: 0\nFeatures\t: fp asimd asimddp sve\n")
    assert environment_fingerprint()["cpu"]["simd"] == ["asimd", "asimddp", "sve"]


def test_gpu_names_and_driver_come_from_the_driver_without_a_cuda_context(monkeypatch, tmp_path):
    monkeypatch.setattr(environment, "_NVIDIA_PROC", tmp_path)
    (tmp_path / "version").write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build\n"
    )
    for bus, model in (("0000:41:00.0", "NVIDIA H200"), ("0000:01:00.0", "NVIDIA A100-SXM4-80GB")):
        (tmp_path / "gpus" / bus).mkdir(parents=True)
        (tmp_path / "gpus" / bus / "information").write_text(f"Model: \t\t {model}\nIRQ: 1\n")
    cuda = environment_fingerprint()["cuda"]
    assert cuda["driver_version"] == "550.54.15"
    if not torch.cuda.is_initialized():
        assert cuda["devices"] == [{"name": "NVIDIA A100-SXM4-80GB"}, {"name": "NVIDIA H200"}]


def test_leads_put_likely_explanations_first_and_name_both_values():
    baseline = environment_fingerprint(variables={"OMP_NUM_THREADS": "1"})
    candidate = json.loads(json.dumps(baseline))
    candidate["threads"]["torch_intra_op"] = baseline["threads"]["torch_intra_op"] + 1
    candidate["variables"]["OMP_NUM_THREADS"] = "2"
    candidate["precision"]["cuda_matmul_allow_tf32"] = True
    candidate["cpu"]["simd"] = ["sse2", "avx2", "avx512f"]
    baseline["cpu"]["simd"] = ["sse2", "avx2"]
    candidate["torch"]["version"] = "9.9.9"
    leads = environment_leads(baseline, candidate)
    assert [(lead.key, lead.category) for lead in leads] == [
        ("cpu.simd", "simd"),
        ("precision.cuda_matmul_allow_tf32", "precision"),
        ("threads.torch_intra_op", "threads"),
        ("variables.OMP_NUM_THREADS", "threads"),
        ("torch.version", "library_version"),
    ]
    assert "only in candidate: avx512f" in leads[0].note
    assert (leads[3].baseline, leads[3].candidate) == ("1", "2")
    assert environment_leads(baseline, baseline) == ()


def test_a_missing_fingerprint_gives_one_lead_that_says_so():
    (lead,) = environment_leads(environment_fingerprint(), None)
    assert lead.key == "environment"
    assert "no environment was recorded in the candidate" in lead.note
