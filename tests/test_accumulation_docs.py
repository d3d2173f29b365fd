"""The worked example of docs/accumulation.md runs and gives the outcomes the document states."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from trainparity._internal.accumulation.check import AccumulationExecutionPlan, check_accumulation
from trainparity._internal.comparison.policies import ToleranceComparison

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "accumulation.md"
MODULE_MARKER = "# causal_lm_example.py\n"
TOLERANCE = ToleranceComparison(rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def example_directory(tmp_path_factory) -> Path:
    """A directory holding the guide's `causal_lm_example.py`, exactly as the guide prints it."""
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), flags=re.DOTALL)
    (module,) = [block for block in blocks if block.startswith(MODULE_MARKER)]
    directory = tmp_path_factory.mktemp("guide")
    (directory / "causal_lm_example.py").write_text(module, encoding="utf-8")
    return directory


def check(directory: Path, case: str, plan: AccumulationExecutionPlan):
    return check_accumulation(
        f"causal_lm_example:{case}", candidate=plan, comparison=TOLERANCE, cwd=directory
    )


def test_mean_of_means_fails_at_loss_accounting(example_directory, monkeypatch):
    monkeypatch.syspath_prepend(str(example_directory))  # the parent loads the case too
    result = check(example_directory, "MeanOfMeansCase", AccumulationExecutionPlan(2))
    assert result.outcome == "FAIL", result.message
    assert result.first_observed_phase == "loss_accounting"
    assert result.primary_difference.path == "loss_accounting.effective_loss"
    assert result.verified_equal_initial_state is True


def test_token_count_normalisation_passes(example_directory, monkeypatch):
    monkeypatch.syspath_prepend(str(example_directory))
    result = check(example_directory, "TokenMeanCase", AccumulationExecutionPlan(2))
    assert result.outcome == "PASS", result.message
    assert result.loss_normalization_captured is True


def test_ignoring_the_declared_accounting_fails_at_the_denominator(example_directory, monkeypatch):
    monkeypatch.syspath_prepend(str(example_directory))
    plan = AccumulationExecutionPlan(2, use_explicit_loss_accounting=False)
    result = check(example_directory, "TokenMeanCase", plan)
    assert result.outcome == "FAIL"
    difference = result.primary_difference
    assert (difference.path, difference.reason) == (
        "loss_accounting.denominator",
        "missing_candidate",
    )
    assert difference.baseline == "19.0"
