"""Cross-machine diff of snapshot files: verdicts, per-tensor table, relative RMS summary, leads."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import textwrap

import pytest
import torch
from trainparity import ExactComparison, Outcome, ToleranceComparison
from trainparity._internal.comparison.snapshots import diff_snapshots
from trainparity._internal.native.core import tensor_bytes
from trainparity._internal.reports.text_views import text_report
from trainparity._internal.state.snapshot_file import write_snapshot

from tests.helpers import rewrite_as_digest_version_1

# One small computation whose float32 result depends on how the reduction is split:
# torch sums a large tensor in per-thread chunks, so 1 and 2 threads round differently.
_RECORD_UNDER_THREADS = textwrap.dedent(
    """
    import sys
    import torch
    from trainparity._internal.state.snapshot_file import write_snapshot

    torch.set_num_threads(int(sys.argv[2]))
    generator = torch.Generator().manual_seed(0)
    values = torch.randn(4_000_000, generator=generator)
    left = torch.randn(64, 128, generator=generator)
    right = torch.randn(128, 64, generator=generator)
    state = {"total": values.sum(), "row_sums": values.reshape(8, -1).sum(dim=1), "product": left @ right}
    write_snapshot(sys.argv[1], state)  # with this process's fingerprint
    """
)


def _write(path, state, **options):
    write_snapshot(path, state, **options)
    return path


def test_thread_count_drift_shows_in_the_table_and_the_environment_leads(tmp_path):
    script = tmp_path / "record.py"
    script.write_text(_RECORD_UNDER_THREADS)
    recordings = []
    for threads in (1, 2):
        environment = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        path = tmp_path / f"threads{threads}.safetensors"
        command = [sys.executable, str(script), str(path), str(threads)]
        recordings.append((subprocess.Popen(command, env=environment), path))
    for process, _ in recordings:
        assert process.wait(timeout=120) == 0
    diff = diff_snapshots(recordings[0][1], recordings[1][1])

    assert diff.outcome is Outcome.FAIL
    drifted = {stats.path: stats for stats in diff.differing_tensors}
    assert "total" in drifted, (
        "a 4M-element float32 sum should round differently on 1 and 2 threads"
    )
    assert drifted["total"].mismatch_count == 1
    assert 0 < drifted["total"].relative_rms_error < 1e-4
    relative = [stats.relative_rms_error for stats in diff.differing_tensors]
    assert relative == sorted(relative, reverse=True)
    lead_keys = {lead.key: lead for lead in diff.environment_leads}
    assert (
        lead_keys["threads.torch_intra_op"].baseline,
        lead_keys["threads.torch_intra_op"].candidate,
    ) == (1, 2)
    assert lead_keys["variables.OMP_NUM_THREADS"].category == "threads"
    assert diff.environment_leads[0].category in ("threads", "simd", "precision")


def test_float32_against_float64_shows_the_drift_and_names_the_default_dtype(tmp_path):
    generator = torch.Generator().manual_seed(1)
    left, right = (
        torch.randn(32, 256, generator=generator),
        torch.randn(256, 16, generator=generator),
    )
    _write(tmp_path / "float32.safetensors", {"product": left @ right})
    torch.set_default_dtype(torch.float64)
    try:
        product = (left.double() @ right.double()).float()
        _write(tmp_path / "float64.safetensors", {"product": product})
    finally:
        torch.set_default_dtype(torch.float32)

    diff = diff_snapshots(tmp_path / "float64.safetensors", tmp_path / "float32.safetensors")
    assert diff.outcome is Outcome.FAIL
    assert diff.primary_difference.path == "product"
    (stats,) = diff.differing_tensors
    assert 0 < stats.mismatch_count <= stats.numel == 32 * 16
    assert 0 < stats.max_rel_error and 0 < stats.relative_rms_error < 1e-5
    (lead,) = diff.environment_leads
    assert (lead.key, lead.baseline, lead.candidate) == (
        "precision.default_dtype",
        "torch.float64",
        "torch.float32",
    )
    loose = diff_snapshots(
        tmp_path / "float64.safetensors",
        tmp_path / "float32.safetensors",
        comparison=ToleranceComparison(rtol=1e-4, atol=1e-4),
    )
    assert loose.outcome is Outcome.PASS
    assert loose.max_relative_rms_error == stats.relative_rms_error


def test_summary_statistics_cover_every_compared_tensor(tmp_path):
    base = torch.linspace(1, 2, 100)
    baseline = {"a": base, "b": base * 2, "c": base * 3, "same": base}
    candidate = {"a": base * (1 + 1e-3), "b": base * 2 * (1 + 1e-5), "c": base * 3, "same": base}
    diff = diff_snapshots(
        _write(tmp_path / "a.safetensors", baseline), _write(tmp_path / "b.safetensors", candidate)
    )
    assert [stats.path for stats in diff.differing_tensors] == ["a", "b"]
    assert diff.compared_tensor_count == 4
    errors = [
        diff.differing_tensors[0].relative_rms_error,
        diff.differing_tensors[1].relative_rms_error,
        0.0,
        0.0,
    ]
    assert diff.median_relative_rms_error == pytest.approx(statistics.median(errors))
    assert diff.max_relative_rms_error == diff.differing_tensors[0].relative_rms_error
    assert diff.message == "first observed divergence at a: tensor_value"


def test_structure_differences_are_reported_in_traversal_order(tmp_path):
    baseline = _write(tmp_path / "a.safetensors", {"model": {"w": torch.ones(2)}, "step": 3})
    candidate = _write(tmp_path / "b.safetensors", {"model": {"w": torch.ones(3)}})
    diff = diff_snapshots(baseline, candidate)
    assert [(d.path, d.reason) for d in diff.all_differences] == [
        ("model.w", "tensor_shape"),
        ("step", "missing_candidate"),
    ]
    assert diff.differing_tensors == ()


def test_identical_snapshots_pass_with_no_leads(tmp_path):
    state = {"w": torch.arange(5.0)}
    diff = diff_snapshots(
        _write(tmp_path / "a.safetensors", state), _write(tmp_path / "b.safetensors", state)
    )
    assert diff.outcome is Outcome.PASS
    assert diff.message == "snapshots are equivalent under policy"
    assert diff.environment_leads == ()
    assert (diff.median_relative_rms_error, diff.max_relative_rms_error) == (0.0, 0.0)


def test_digest_only_snapshots_compare_by_digest_and_say_so(tmp_path):
    baseline = _write(tmp_path / "a.safetensors", {"w": torch.ones(4), "v": torch.zeros(2)})
    candidate = _write(
        tmp_path / "b.safetensors",
        {"w": torch.ones(4) * 2, "v": torch.zeros(2)},
        include_values=False,
    )
    exact = diff_snapshots(baseline, candidate, comparison=ExactComparison())
    assert exact.outcome is Outcome.FAIL
    assert exact.compared_by == "digest"
    assert exact.message.endswith("(compared by digest: values were not recorded)")
    (stats,) = exact.differing_tensors
    assert (stats.path, stats.mismatch_count, stats.relative_rms_error) == ("w", None, None)
    # "v" is equal (0), "w" differs by an unknown amount: no summary may claim 0.
    assert (exact.median_relative_rms_error, exact.max_relative_rms_error) == (None, None)

    tolerant = diff_snapshots(baseline, candidate, comparison=ToleranceComparison(rtol=1, atol=1))
    assert tolerant.outcome is Outcome.ABSTAIN
    assert "record both snapshots with values" in tolerant.message
    assert tolerant.primary_difference is None


def test_digests_of_different_versions_are_never_compared(tmp_path):
    state = {"w": torch.ones(4)}
    old_values = rewrite_as_digest_version_1(_write(tmp_path / "old.safetensors", state))
    old_digests = rewrite_as_digest_version_1(
        _write(tmp_path / "old-digests.safetensors", state, include_values=False),
        {"w": bytes(tensor_bytes(state["w"]))},
    )
    new_values = _write(tmp_path / "new.safetensors", state)
    new_digests = _write(tmp_path / "new-digests.safetensors", state, include_values=False)
    # Values on both sides: the differing digests are only a missed shortcut.
    assert diff_snapshots(old_values, new_values).outcome is Outcome.PASS
    assert diff_snapshots(old_digests, old_values).outcome is Outcome.PASS
    for baseline, candidate in ((old_digests, new_values), (new_digests, old_values)):
        diff = diff_snapshots(baseline, candidate)
        assert diff.outcome is Outcome.ERROR
        assert "different digest versions" in diff.message


def test_missing_or_corrupt_files_are_errors_that_name_the_file(tmp_path):
    good = _write(tmp_path / "a.safetensors", {"w": torch.ones(1)})
    missing = diff_snapshots(good, tmp_path / "nowhere.safetensors")
    assert missing.outcome is Outcome.ERROR
    assert "nowhere.safetensors" in missing.message
    corrupt = tmp_path / "corrupt.safetensors"
    corrupt.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ")
    broken = diff_snapshots(corrupt, good)
    assert broken.outcome is Outcome.ERROR
    assert "corrupt.safetensors" in broken.message
    # Nothing was read, so the text report must not claim that the environments match.
    assert "Environment leads" not in text_report(missing.to_dict())


def test_a_comparison_that_is_not_a_policy_is_rejected(tmp_path):
    good = _write(tmp_path / "a.safetensors", {"w": torch.ones(1)})
    with pytest.raises(TypeError, match="ExactComparison or ToleranceComparison"):
        diff_snapshots(good, good, comparison="exact")


def test_the_report_is_json_with_metadata_first(tmp_path):
    good = _write(tmp_path / "a.safetensors", {"w": torch.ones(1)})
    report = diff_snapshots(good, good).to_dict()
    assert list(report)[:3] == ["schema_version", "trainparity_version", "outcome"]
    assert json.loads(json.dumps(report))["outcome"] == "PASS"
