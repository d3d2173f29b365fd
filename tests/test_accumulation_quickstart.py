"""`python -m trainparity.quickstarts.accumulation` (CONTRACT §10.2, ANCHOR_CASES §2.5)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import trainparity
from trainparity.quickstarts.accumulation import Case


def test_quickstart_case_accounts_for_four_samples():
    case = Case()
    state = case.build(seed=17, device="cpu")
    term = case.loss(state, case.batch("cpu"))
    assert term.denominator == 4
    assert math.isfinite(float(term.value.detach()))
    assert case.equivalence == "same four ordered samples; global squared-error mean"


def test_quickstart_prints_a_clean_pass_and_the_intentional_fail(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "trainparity.quickstarts.accumulation", "--json"],
        cwd=tmp_path,  # no checkout needed
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    payload = json.loads(completed.stdout)
    assert completed.stdout == json.dumps(payload, indent=2, sort_keys=True) + "\n"
    version = trainparity.__version__
    assert (payload["schema_version"], payload["trainparity_version"]) == (2, version)
    clean, fault = payload["clean"], payload["intentional_fail"]
    for report in (clean, fault):
        assert (report["schema_version"], report["trainparity_version"]) == (2, version)
        assert report["case"] == "trainparity.quickstarts.accumulation:Case"
        assert report["equivalence"] == "same four ordered samples; global squared-error mean"
        assert report["comparison_policy"] == "explicit_tolerance"
        assert report["verified_equal_initial_state"] is True
        assert len(set(report["process_ids"])) == 3
        assert report["persisted_artifact_bytes"] == 0
    assert clean["outcome"] == "PASS"
    assert (
        clean["message"] == "declared executions are equivalent for one optimizer-update boundary"
    )
    assert clean["loss_normalization_captured"] is True
    assert clean["all_differences"] == [] and clean["primary_difference"] is None
    assert fault["outcome"] == "FAIL"
    assert fault["first_observed_phase"] == "loss_accounting"
    assert (
        fault["message"] == "first observed divergence in loss_accounting; not a root-cause claim"
    )
    assert fault["loss_normalization_captured"] is False
    assert fault["primary_difference"] == {
        "path": "loss_accounting.denominator",
        "reason": "missing_candidate",
        "baseline": "4.0",
        "candidate": "<missing>",
        "max_abs_error": None,
        "max_rel_error": None,
    }
    assert [(d["path"], d["reason"]) for d in fault["all_differences"]] == [
        ("loss_accounting.denominator", "missing_candidate"),
        ("loss_accounting.effective_loss", "tensor_value"),
        ("loss_accounting.normalization_captured", "value"),
        ("loss_accounting.numerator", "missing_candidate"),
    ]
    effective = fault["all_differences"][1]
    assert effective["max_abs_error"] > 0 and effective["max_rel_error"] > 0
    normalization = fault["all_differences"][2]
    assert (normalization["baseline"], normalization["candidate"]) == ("True", "False")
