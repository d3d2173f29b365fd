"""The Hugging Face Trainer with a DeepSpeed config, ZeRO-2 on 2 gloo CPU ranks (hf_cases.py).

`trainparity resume hf_cases:TrainerDeepSpeedResumeCase` runs
docs/examples/deepspeed_project/train_hf.py (a 1-layer GPT-2, TrainingArguments(deepspeed=...),
the engine's state recorded by the Trainer's callback, the engine's checkpoint read
inside the Trainer's): clean (PASS, steps 2–4 recorded after the resume), and
TrainerDeepSpeedNoOptimizerStatesCase (the engine resumed without its optimizer states:
FAIL right after loading). The fault acts only when the Trainer loads, so it runs only
its resumed phase on the clean check's other phases, which `trainparity judge
--run-missing` runs and judges (tests/shared_baselines.py). The shm op is built as in
test_deepspeed.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("deepspeed")
pytest.importorskip("transformers")

from tests.deepspeed_ops import DEEPSPEED_PRELOADS  # noqa: E402
from tests.deepspeed_project import (  # noqa: E402
    CONCURRENT_CHECKS,
    RESUME,
    SPLIT_STEP,
    differences_at_first_step,
    final_differences,
    prepared,
)
from tests.few_at_a_time import report_of, run_a_few_at_a_time  # noqa: E402
from tests.shared_baselines import judge_here, shared_baseline_checks  # noqa: E402

pytestmark = pytest.mark.warm_preload(*DEEPSPEED_PRELOADS, "transformers.trainer")

CLEAN = "TrainerDeepSpeedResumeCase"
FAULT = "TrainerDeepSpeedNoOptimizerStatesCase"


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> tuple[Path, Path, dict[str, str]]:
    return prepared(tmp_path_factory, "deepspeed_trainer")


@pytest.fixture(scope="module")
def runs(project) -> dict:
    root, cwd, environment = project
    commands, after = shared_baseline_checks(
        CLEAN, [*RESUME, f"hf_cases:{CLEAN}"], {FAULT: [*RESUME, f"hf_cases:{FAULT}"]}, root
    )
    done: dict = {"root": root}
    done.update(
        run_a_few_at_a_time(
            commands, cwd=cwd, env=environment, at_once=CONCURRENT_CHECKS, after=after, here=True
        )
    )
    done.update(judge_here(CLEAN, [FAULT], root, environment))
    return done


def test_the_trainer_resuming_without_optimizer_states_fails_right_after_loading(runs):
    report = report_of(runs, FAULT)
    assert report["outcome"] == "FAIL", report["message"]
    assert report["first_divergent_step"] == SPLIT_STEP
    first = differences_at_first_step(report)
    # WarmupDecayLR has not stepped in the fresh optimizer: its rate is 0, not the restored one.
    assert "rank0.optimizer.param_groups[0].lr" in first
    moments = first['rank0.optimizer.state["transformer.wte.weight"].exp_avg']
    assert moments["reason"] == "missing_candidate"
    assert "zero_fragment mesh 2" in moments["baseline"]
    # The Trainer's observer reads the engine's checkpoint inside its own.
    assert 'deepspeed.optimizer.state["transformer.wte.weight"].step' in final_differences(report)


def test_a_clean_trainer_resume_under_deepspeed_passes_step_by_step(runs):
    report = report_of(runs, CLEAN)
    assert report["outcome"] == "PASS", report["message"]
    assert report["message"] == "final states are exactly equivalent at step 4"
    assert report["trajectory"]["recorded_steps"]["candidate_resume"] == {
        "rank0": [2, 3, 4],
        "rank1": [2, 3, 4],
    }
