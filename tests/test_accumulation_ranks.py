"""check_accumulation with a multi-rank candidate: real 2-rank gloo processes against the one-process reference.

The own DDP loops of tests/fixtures/own_step_cases.py and the plan's
multi-rank faults each PASS or FAIL at the phase where they are first
observed; a rank that crashes or hangs is an ERROR that leaves no process
behind. Tiny models, one thread per process; each check starts four
processes (two baselines, two ranks).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from trainparity._internal.accumulation.check import AccumulationExecutionPlan, check_accumulation
from trainparity._internal.comparison.policies import ToleranceComparison

from tests.few_at_a_time import beside_the_module

REPOSITORY = Path(__file__).resolve().parent.parent
TOLERANCE = ToleranceComparison(rtol=1e-5, atol=1e-6)
ONE_THREAD = {"OMP_NUM_THREADS": "1"}
GRADIENT_PATHS = ['gradient["0"].weight', 'gradient["1"].bias', 'gradient["1"].weight']
RANK_PARAMETERS = ['ranks.parameters["0"].weight', 'ranks.parameters["1"].bias']


def check(case: str, plan: AccumulationExecutionPlan, **options):
    options.setdefault("comparison", TOLERANCE)
    options.setdefault("timeout", 240)
    return check_accumulation(
        f"tests.fixtures.own_step_cases:{case}",
        candidate=plan,
        cwd=REPOSITORY,
        environment=ONE_THREAD,
        **options,
    )


def two_ranks(**flags) -> AccumulationExecutionPlan:
    return AccumulationExecutionPlan(4, world_size=2, **flags)


def assert_no_process_left(process_ids) -> None:
    for pid in process_ids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.parametrize(
    ("case", "plan"),
    [
        pytest.param("DDPLoopCase", two_ranks(), id="own-no-sync-loop"),
        pytest.param("ClipAfterSyncCase", two_ranks(clip_grad_norm=0.5), id="own-clip-after-sync"),
        pytest.param("TokenReferenceCase", two_ranks(), id="plan-ddp-loop"),
    ],
)
def test_correct_multi_rank_loops_pass(case, plan):
    result = check(case, plan)
    assert result.outcome == "PASS", result.message
    assert len(set(result.process_ids)) == 4  # two baselines, two ranks
    assert result.verified_equal_initial_state is True
    assert result.loss_normalization_captured is True


MULTI_RANK_FAULTS = [
    # (case, plan, phase, primary path, message fragment)
    pytest.param(
        "NoSyncBackwardOnlyCase",
        two_ranks(),
        "ranks",
        ["ranks.gradient_syncs"],
        "rank 0 synchronised gradients 2 times in one update",
        id="own-no-sync-around-backward-only",
    ),
    pytest.param(
        "SyncFirstMicrobatchCase",
        two_ranks(),
        "ranks",
        RANK_PARAMETERS,
        "rank 0 and rank 1 hold different parameters after the update",
        id="own-sync-first-microbatch",
    ),
    pytest.param(
        "ClipBeforeSyncCase",
        two_ranks(clip_grad_norm=0.5),
        "gradient",
        ["clipping.total_norm", *GRADIENT_PATHS],  # each rank clipped its own gradients' norm
        "the gradients train_step clipped had norm",
        id="own-clip-before-sync",
    ),
    pytest.param(
        "PerRankNormalizationCase",
        two_ranks(),
        "loss_accounting",
        ["loss_accounting.effective_loss"],
        "first observed divergence in loss_accounting",
        id="own-per-rank-token-normalisation",
    ),
    pytest.param(
        "TokenReferenceCase",
        two_ranks(no_sync_backward_only=True),
        "ranks",
        ["ranks.gradient_syncs"],
        "rank 0 synchronised gradients 2 times in one update",
        id="plan-no-sync-backward-only",
    ),
    pytest.param(
        "TokenReferenceCase",
        two_ranks(sync_first_microbatch=True),
        "ranks",
        RANK_PARAMETERS,
        "rank 0 and rank 1 hold different parameters after the update",
        id="plan-sync-first-microbatch",
    ),
    pytest.param(
        "TokenReferenceCase",
        two_ranks(clip_grad_norm=0.5, clip_before_sync=True),
        "gradient",
        GRADIENT_PATHS,
        "first observed divergence in gradient",
        id="plan-clip-before-sync",
    ),
    pytest.param(
        "TokenReferenceCase",
        two_ranks(per_rank_loss_normalization=True),
        "loss_accounting",
        ["loss_accounting.effective_loss"],
        "first observed divergence in loss_accounting",
        id="plan-per-rank-loss-normalisation",
    ),
]


@pytest.mark.parametrize(("case", "plan", "phase", "paths", "fragment"), MULTI_RANK_FAULTS)
def test_multi_rank_mistakes_fail_where_first_observed(case, plan, phase, paths, fragment):
    result = check(case, plan)
    assert result.outcome == "FAIL", result.message
    assert result.first_observed_phase == phase
    assert fragment in result.message and result.message.endswith("not a root-cause claim")
    assert [difference.path for difference in result.all_differences][: len(paths)] == paths
    assert result.verified_equal_initial_state is True
    if phase == "ranks" and paths == ["ranks.gradient_syncs"]:
        syncs = result.primary_difference
        assert (syncs.baseline, syncs.candidate) == ("1", "2")


def test_a_rank_stepping_the_optimizer_per_microbatch_fails_at_its_step_count():
    # Each of its backwards synchronised too (ranks.gradient_syncs 2): the step count,
    # which makes every other observation one of two updates, decides first.
    result = check("StepPerMicrobatchDDPCase", two_ranks())
    assert result.outcome == "FAIL", result.message
    assert result.first_observed_phase == "optimizer_state"
    assert result.message == (
        "first observed divergence in optimizer_state: rank 0's train_step called "
        "optimizer.step 2 times in one update (the reference: 1); not a root-cause claim"
    )
    count = result.primary_difference
    assert (count.path, count.baseline, count.candidate) == ("optimizer.step_calls", "1", "2")
    assert len(set(result.process_ids)) == 4


def test_a_crashing_rank_is_an_error_and_stops_the_other_ranks(tmp_path):
    result = check("CrashingRankCase", two_ranks(), timeout=120, temporary_root=tmp_path)
    assert result.outcome == "ERROR"
    first, *rest = result.message.split("\n")
    assert first.startswith("candidate.rank1 child exited with status 3")
    assert rest[-2:] == [
        "  rank 1 crashing on purpose",
        "full log: removed with the run directory; pass work_dir (--work-dir) to keep it",
    ]
    assert_no_process_left(result.process_ids)
    assert list(tmp_path.iterdir()) == []


def test_a_single_rank_plan_keeps_the_contract_fields_and_a_multi_rank_plan_round_trips():
    assert len(AccumulationExecutionPlan(2).to_dict()) == 10
    plan = two_ranks(sync_first_microbatch=True)
    assert plan.to_dict()["world_size"] == 2 and plan.to_dict()["sync_first_microbatch"] is True
    assert "clip_before_sync" not in plan.to_dict()
    assert AccumulationExecutionPlan.from_dict(plan.to_dict()) == plan


def test_the_plans_multi_rank_loop_refuses_an_fsdp2_model_and_says_what_to_do():
    from types import SimpleNamespace

    from trainparity._internal.accumulation.ranks import plan_train_step

    fsdp2_rank = SimpleNamespace(sharded=True)  # RankContext.wrap found a fully_shard model
    with pytest.raises(TypeError, match="give the case its own train_step, written for FSDP2"):
        plan_train_step(object(), two_ranks(), fsdp2_rank)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"world_size": 2, "microbatch_count": 3}, "must be a multiple of world_size"),
        ({"microbatch_count": 2, "sync_first_microbatch": True}, "needs world_size > 1"),
        (
            {"world_size": 2, "microbatch_count": 2, "omit_final_microbatch": True},
            "describes the single-rank loop",
        ),
        (
            {"world_size": 2, "microbatch_count": 2, "clip_before_sync": True},
            "clip_before_sync needs clip_grad_norm",
        ),
        ({"world_size": 0, "microbatch_count": 2}, "world_size must be positive"),
    ],
)
def test_impossible_multi_rank_plans_are_rejected(flags, message):
    with pytest.raises(ValueError, match=message):
        AccumulationExecutionPlan(**flags).validate()


# Last in the module: the other tests run while its check waits out its timeout.
HANGING_TEST = "test_a_hanging_rank_is_a_timeout_error_that_leaves_no_process"


@pytest.fixture(scope="module", autouse=True)
def hanging_check(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """The hanging-rank check and its work directory, started with the module's first test
    and run beside the others.

    Most of it is its 30 s timeout, with nothing to compute: run alone, it held this worker
    idle. Beside another check it forks from a warm server of its own. Not started when its
    test is not selected.
    """
    work_dir = tmp_path_factory.mktemp("hanging")
    # The ranks start warm (forked, torch imported): 30 s leaves the baselines and the
    # ranks' set-up many times what they take, and the hang itself is 600 s.
    with beside_the_module(
        request, HANGING_TEST, check, "HangingRankCase", two_ranks(), timeout=30, work_dir=work_dir
    ) as future:
        yield future, work_dir


def test_a_hanging_rank_is_a_timeout_error_that_leaves_no_process(hanging_check):
    future, tmp_path = hanging_check
    result = future.result()
    assert result.outcome == "ERROR"
    first, *rest = result.message.split("\n")
    rank = first.removesuffix(" child exceeded timeout")
    assert rank in ("candidate.rank0", "candidate.rank1")
    log = tmp_path / "candidate" / rank.removeprefix("candidate.") / "stderr.log"
    assert rest[-1] in (f"full log: {log}", f"{rank}'s stderr is empty")
    assert_no_process_left(result.process_ids)
