"""DeepSpeed ZeRO-3 on 2 gloo CPU ranks: the example project's own cases (parity_case.py).

`trainparity resume parity_case:Zero3ResumeCase` runs docs/examples/deepspeed_project/
train.py with `--stage 3` (parameters partitioned too) through the case's own torchrun
command: clean (PASS, every step 0–5 recorded and equal on both ranks), then
Zero3NoOptimizerStatesCase (`load_optimizer_states=False`: FAIL right after loading)
and Zero3ConfigLrAfterLoadCase (the configured learning rate put back after loading,
DeepSpeed#4344's class: FAIL at exactly the learning rate). Both faults act only when
the script loads, so each runs only its resumed phase on the clean check's other
phases, which `trainparity judge --run-missing` runs and judges
(tests/shared_baselines.py). The ZeRO-2 script's checks are in test_deepspeed.py; the
shm op is built as there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("deepspeed")

from tests.deepspeed_ops import DEEPSPEED_PRELOADS  # noqa: E402
from tests.deepspeed_project import (  # noqa: E402
    CONCURRENT_CHECKS,
    RESUME,
    assert_a_clean_resume_passed_step_by_step,
    assert_no_optimizer_states_failed_right_after_loading,
    assert_the_configured_lr_put_back_failed_at_the_learning_rate,
    prepared,
)
from tests.few_at_a_time import run_a_few_at_a_time  # noqa: E402
from tests.shared_baselines import judge_here, shared_baseline_checks  # noqa: E402

pytestmark = pytest.mark.warm_preload(*DEEPSPEED_PRELOADS)

CLEAN = "Zero3ResumeCase"
FAULTS = ("Zero3NoOptimizerStatesCase", "Zero3ConfigLrAfterLoadCase")


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> tuple[Path, Path, dict[str, str]]:
    return prepared(tmp_path_factory, "deepspeed_zero3")


@pytest.fixture(scope="module")
def runs(project) -> dict:
    root, cwd, environment = project
    faults = {case: [*RESUME, f"parity_case:{case}"] for case in FAULTS}
    commands, after = shared_baseline_checks(CLEAN, [*RESUME, f"parity_case:{CLEAN}"], faults, root)
    done: dict = {"root": root}
    done.update(
        run_a_few_at_a_time(
            commands, cwd=cwd, env=environment, at_once=CONCURRENT_CHECKS, after=after, here=True
        )
    )
    done.update(judge_here(CLEAN, faults, root, environment))
    return done


def test_a_clean_zero3_resume_passes_step_by_step(runs):
    assert_a_clean_resume_passed_step_by_step(runs, CLEAN)


def test_loading_without_optimizer_states_fails_right_after_loading(runs):
    assert_no_optimizer_states_failed_right_after_loading(runs, "Zero3NoOptimizerStatesCase")


def test_the_configured_lr_put_back_after_loading_fails_at_the_learning_rate(runs):
    assert_the_configured_lr_put_back_failed_at_the_learning_rate(
        runs, "Zero3ConfigLrAfterLoadCase", zero3=True
    )
