"""check_resume under NoiseComparison on a real nondeterministic CUDA job (index_add_ atomics)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import trainparity
from trainparity import ExactComparison, NoiseComparison, Outcome

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

REPO_ROOT = Path(__file__).resolve().parents[2]
CASES = "tests.gpu.index_add_training"


def check(case: str, tmp_path: Path, comparison):
    return trainparity.check_resume(
        f"{CASES}:{case}", cwd=REPO_ROOT, temporary_root=tmp_path, comparison=comparison
    )


def test_atomics_make_the_baselines_differ_and_the_envelope_passes_the_clean_resume(tmp_path):
    result = check("IndexAddCase", tmp_path, NoiseComparison())
    print(result.message)
    assert result.outcome is Outcome.PASS, result.message
    steps = result.noise_envelope["steps"]
    # The nondeterminism is real: the uninterrupted runs differ at some recorded step.
    assert any(value > 0 for row in steps for value in row["noise"].values()), steps
    print("closest approach", result.noise_envelope["closest_approach"])
    print("sensitivity", result.noise_envelope["sensitivity"])


def test_the_exact_comparison_cannot_judge_the_same_job(tmp_path):
    result = check("IndexAddCase", tmp_path, ExactComparison())
    print(result.message)
    assert result.outcome is Outcome.ABSTAIN, result.message


def test_a_lossy_restore_leaves_the_envelope_at_the_split(tmp_path):
    result = check("LossyIndexAddCase", tmp_path, NoiseComparison())
    print(result.message)
    assert result.outcome is Outcome.FAIL, result.message
    assert result.first_divergent_step == 3
    assert result.primary_difference.path == "embedding"
