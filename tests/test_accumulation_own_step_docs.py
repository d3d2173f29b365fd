"""The own-step, DDP and FSDP2 examples of docs/accumulation.md run and give the outcomes the guide states."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from trainparity._internal.accumulation.check import AccumulationExecutionPlan, check_accumulation
from trainparity._internal.comparison.policies import ToleranceComparison

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "accumulation.md"
MODULES = ("own_step_example.py", "ddp_step_example.py", "fsdp2_step_example.py")
TOLERANCE = ToleranceComparison(rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def example_directory(tmp_path_factory) -> Path:
    """A directory holding the guide's example modules, exactly as the guide prints them."""
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), flags=re.DOTALL)
    directory = tmp_path_factory.mktemp("guide")
    for name in MODULES:
        (module,) = [block for block in blocks if block.startswith(f"# {name}\n")]
        (directory / name).write_text(module, encoding="utf-8")
    return directory


@pytest.fixture
def check(example_directory, monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(example_directory))  # the parent loads the case too
    # The children's temporary root: fully_shard's import of torch._dynamo makes torch's
    # compile cache directory there.
    environment = {"OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}

    def run(case: str, plan: AccumulationExecutionPlan):
        return check_accumulation(
            case,
            candidate=plan,
            comparison=TOLERANCE,
            cwd=example_directory,
            environment=environment,
        )

    return run


def test_the_guides_own_step_passes_and_its_mean_of_means_fails(check):
    fixed = check("own_step_example:TokenCase", AccumulationExecutionPlan(2))
    assert fixed.outcome == "PASS", fixed.message
    buggy = check("own_step_example:MeanOfMeansCase", AccumulationExecutionPlan(2))
    assert buggy.outcome == "FAIL", buggy.message
    assert buggy.first_observed_phase == "loss_accounting"
    assert buggy.primary_difference.path == "loss_accounting.effective_loss"


def test_the_guides_ddp_step_passes_on_two_ranks(check):
    result = check("ddp_step_example:DDPTokenCase", AccumulationExecutionPlan(4, world_size=2))
    assert result.outcome == "PASS", result.message
    assert len(result.process_ids) == 4


def test_the_guides_fsdp2_step_passes_on_two_ranks_and_its_summed_gradients_fail(check):
    plan = AccumulationExecutionPlan(4, world_size=2)
    fixed = check("fsdp2_step_example:FSDP2TokenCase", plan)
    assert fixed.outcome == "PASS", fixed.message
    assert len(fixed.process_ids) == 4
    assert fixed.compared_on.startswith("candidate: global tensors, reassembled"), fixed.compared_on
    buggy = check("fsdp2_step_example:SummedGradientsCase", plan)
    assert buggy.outcome == "FAIL", buggy.message
    assert buggy.first_observed_phase == "gradient"
    assert buggy.primary_difference.path == 'gradient["0"].weight'
    assert buggy.to_dict()["compared_on"] == fixed.compared_on
