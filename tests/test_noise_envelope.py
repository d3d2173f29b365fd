"""NoiseComparison and one step judged against the envelope (noise/envelope.py), in process."""

from __future__ import annotations

import math

import pytest
import torch
import trainparity
from trainparity import ExactComparison, NoiseComparison
from trainparity._internal.noise.envelope import EXIT_REASON, NoiseMemory, judge_step
from trainparity._internal.state.freeze import freeze

torch.manual_seed(0)
WEIGHT = torch.randn(4000)


def state(jitter: float = 0.0, *, step: int = 3, lr: float = 0.1, shift: float = 0.0, seed=None):
    """A training state whose weight differs from WEIGHT by rounding-sized noise (`jitter`)."""
    generator = torch.Generator().manual_seed(seed if seed is not None else 0)
    noise = jitter * torch.randn(WEIGHT.shape, generator=generator)
    return freeze(
        {
            "model": {"weight": WEIGHT * (1 + noise) + shift, "frozen": torch.ones(3)},
            "optimizer": {"lr": lr, "step": step},
            "rng": torch.arange(5, dtype=torch.uint8),
        }
    )


def samples(count: int = 3, jitter: float = 1e-7):
    return [state(jitter, seed=index) for index in range(count)]


class TestPolicy:
    def test_defaults_and_settings(self):
        policy = NoiseComparison()
        assert (policy.factor, policy.baselines, policy.max_noise) == (8.0, 3, None)
        assert policy.settings()["factor"] == 8.0
        assert policy == NoiseComparison(factor=8, baselines=3)
        assert hash(policy) == hash(NoiseComparison())
        assert "NoiseComparison(factor=8.0" in repr(policy)

    @pytest.mark.parametrize(
        ("arguments", "named"),
        [
            ({"factor": 0}, "factor"),
            ({"factor": -1.0}, "factor"),
            ({"factor": math.inf}, "factor"),
            ({"baselines": 1}, "baselines"),
            ({"baselines": 2.5}, "baselines"),
            ({"baselines": True}, "baselines"),
            ({"floor_rtol": -1e-9}, "floor_rtol"),
            ({"floor_atol": math.nan}, "floor_atol"),
            ({"max_noise": 0.0}, "max_noise"),
        ],
    )
    def test_bad_settings_name_what_is_wrong(self, arguments, named):
        with pytest.raises(ValueError, match=named):
            NoiseComparison(**arguments)

    def test_public_names(self):
        assert trainparity.NoiseComparison is NoiseComparison
        assert trainparity.api.NoiseComparison is NoiseComparison

    def test_a_diff_of_two_states_refuses_it(self):
        with pytest.raises(TypeError, match="several uninterrupted runs"):
            trainparity.compare_states({"a": 1}, {"a": 1}, comparison=NoiseComparison())


class TestJudgeStep:
    def test_candidate_inside_the_noise_passes(self):
        judged = judge_step(NoiseComparison(), samples(), state(1e-7, seed=9))
        assert judged.differences == ()
        assert judged.sample_differences == ()
        (entry,) = judged.paths
        assert entry.path == "model.weight"
        assert 0 < entry.ratio < 8
        assert 1e-7 < entry.noise < 4e-7  # the largest of three pairs, each about √2 · jitter

    def test_candidate_past_factor_times_the_noise_fails_on_that_path(self):
        judged = judge_step(NoiseComparison(), samples(), state(1e-5, seed=9))
        (difference,) = judged.differences
        assert (difference.path, difference.reason) == ("model.weight", EXIT_REASON)
        entry = judged.paths[0]
        assert entry.outside and entry.ratio > 8
        assert difference.max_rel_error == entry.excursion

    def test_the_factor_moves_the_limit(self):
        candidate = state(3e-6, seed=9)
        assert judge_step(NoiseComparison(factor=8), samples(), candidate).differences
        assert not judge_step(NoiseComparison(factor=100), samples(), candidate).differences

    def test_exact_paths_stay_exact(self):
        judged = judge_step(NoiseComparison(), samples(), state(1e-7, seed=9, lr=0.10001))
        assert [(d.path, d.reason) for d in judged.differences] == [("optimizer.lr", "value")]
        # At a noisy step a float computed from float32 tensors may round one ulp apart.
        rounded = state(1e-7, seed=9, lr=0.1 * (1 + 2**-23))
        assert judge_step(NoiseComparison(), samples(), rounded).differences == ()
        judged = judge_step(NoiseComparison(), samples(), state(1e-7, seed=9, step=4))
        assert [d.path for d in judged.differences] == ["optimizer.step"]

    def test_a_step_where_every_sample_agrees_is_judged_to_a_few_rounding_units(self):
        """Two runs of a nondeterministic job can agree bit for bit at a step by chance: a third
        one ulp away is not a fault, one further away keeps the exact comparison's reason."""
        identical = [state() for _ in range(3)]
        nudged = freeze(
            {
                "model": {"weight": WEIGHT.clone(), "frozen": torch.ones(3)},
                "optimizer": {"lr": 0.1, "step": 3},
                "rng": torch.arange(5, dtype=torch.uint8),
            }
        )
        assert judge_step(NoiseComparison(), identical, nudged).differences == ()

        def with_weight(weight: torch.Tensor):
            return freeze(
                {
                    "model": {"weight": weight, "frozen": torch.ones(3)},
                    "optimizer": {"lr": 0.1, "step": 3},
                    "rng": torch.arange(5, dtype=torch.uint8),
                }
            )

        weight = WEIGHT.clone()
        weight[7] = torch.nextafter(weight[7], torch.tensor(math.inf))  # one ulp
        assert judge_step(NoiseComparison(), identical, with_weight(weight)).differences == ()
        judged = judge_step(NoiseComparison(), identical, with_weight(WEIGHT * (1 + 1e-5)))
        assert [(d.path, d.reason) for d in judged.differences] == [
            ("model.weight", "tensor_value")
        ]
        assert judge_step(NoiseComparison(), identical, with_weight(-WEIGHT)).differences

    def test_at_a_noisy_step_agreeing_samples_get_one_rounding_unit(self):
        def with_frozen(frozen: torch.Tensor):
            generator = torch.Generator().manual_seed(9)
            weight = WEIGHT * (1 + 1e-7 * torch.randn(WEIGHT.shape, generator=generator))
            return freeze({"model": {"weight": weight}, "buffers": {"frozen": frozen}, "lr": 0.1})

        one_ulp = torch.ones(3)
        one_ulp[0] = torch.nextafter(one_ulp[0], torch.tensor(2.0))
        samples_alike = [
            freeze({"model": {"weight": WEIGHT * (1 + 1e-7 * torch.randn(WEIGHT.shape))},
                    "buffers": {"frozen": torch.ones(3)}, "lr": 0.1})
            for _ in range(3)
        ]  # fmt: skip
        judged = judge_step(NoiseComparison(), samples_alike, with_frozen(one_ulp))
        assert judged.differences == ()
        entry = next(e for e in judged.paths if e.path == "buffers.frozen")
        assert entry.rounding_unit == 2.0**-23 and not entry.outside
        far = judge_step(NoiseComparison(), samples_alike, with_frozen(torch.ones(3) * 1.001))
        assert [d.path for d in far.differences] == ["buffers.frozen"]

    def test_a_tiny_tensor_takes_its_components_noise(self):
        """Three samples of one number can agree by chance: the component's noise bounds it.

        The 1-element bias below agrees to 1e-9 in the samples, while the weight
        beside it, moved by the same nondeterminism, differs by 1e-6 relative.
        """

        def run(seed: int, bias: float):
            generator = torch.Generator().manual_seed(seed)
            weight = WEIGHT * (1 + 1e-6 * torch.randn(WEIGHT.shape, generator=generator))
            return freeze({"model": {"weight": weight, "bias": torch.tensor([bias])}})

        close = [run(0, 0.5), run(1, 0.5 * (1 + 1e-9)), run(2, 0.5 * (1 - 1e-9))]
        assert not judge_step(NoiseComparison(), close, run(3, 0.5 * (1 + 3e-6))).differences
        far = judge_step(NoiseComparison(), close, run(3, 0.5 * (1 + 1e-3)))
        assert [d.path for d in far.differences] == ["model.bias"]
        assert far.differences[0].reason == EXIT_REASON

    def test_samples_that_disagree_on_an_exact_path_are_reported(self):
        disagreeing = [state(1e-7, seed=0), state(1e-7, seed=1, step=4)]
        judged = judge_step(NoiseComparison(), disagreeing, state(1e-7, seed=2))
        assert [(index, d.path) for index, d in judged.sample_differences] == [
            (1, "optimizer.step")
        ]

    def test_max_noise_names_the_noisiest_path(self):
        judged = judge_step(NoiseComparison(max_noise=1e-9), samples(), state(1e-7, seed=9))
        noisy = judged.too_noisy(1e-9)
        assert noisy is not None and noisy.path == "model.weight"
        assert judged.too_noisy(1e-3) is None

    def test_floors_widen_the_limit(self):
        candidate = state(1e-5, seed=9)
        assert judge_step(NoiseComparison(), samples(), candidate).differences
        widened = NoiseComparison(floor_rtol=1e-4)
        assert not judge_step(widened, samples(), candidate).differences

    def test_noise_carried_forward_keeps_a_close_pair_from_narrowing_the_envelope(self):
        carried = NoiseMemory()
        judge_step(NoiseComparison(), samples(jitter=1e-5), noise_so_far=carried)
        assert 1e-5 < carried.relative("model.weight") < 4e-5
        close_pair = samples(jitter=1e-7)
        candidate = state(5e-6, seed=9)
        assert judge_step(NoiseComparison(), close_pair, candidate).differences
        assert not judge_step(NoiseComparison(), close_pair, candidate, carried).differences

    def test_python_floats_are_judged_like_tensors_once_they_are_noisy(self):
        def with_loss(loss: float):
            return freeze({"loss": loss, "weight": WEIGHT})

        noisy = [with_loss(1.0), with_loss(1.0 + 1e-7), with_loss(1.0 - 1e-7)]
        assert not judge_step(NoiseComparison(), noisy, with_loss(1.0 + 5e-7)).differences
        assert judge_step(NoiseComparison(), noisy, with_loss(1.01)).differences

    def test_a_logged_float_is_not_judged_on_the_spread_of_three_samples_alone(self):
        """Three samples of one number can lie close by chance (a Cauchy-like tail): a clean
        fourth 20x their spread away passes; one 1 % off still fails."""

        def logged(loss: float):
            return freeze({"log": {"loss": loss, "epoch": 1.0}})

        close = [logged(2.0), logged(2.0 * (1 + 1e-7)), logged(2.0 * (1 - 1e-7))]
        assert not judge_step(NoiseComparison(), close, logged(2.0 * (1 + 4e-6))).differences
        far = judge_step(NoiseComparison(), close, logged(2.02))
        assert [d.path for d in far.differences] == ["log.loss"]

    def test_nan_is_only_equal_to_the_same_bytes(self):
        def with_nan(value: float):
            weight = WEIGHT.clone()
            weight[0] = value
            return freeze({"weight": weight})

        agreeing = [with_nan(math.nan) for _ in range(2)]
        assert not judge_step(NoiseComparison(), agreeing, with_nan(math.nan)).differences
        assert judge_step(NoiseComparison(), agreeing, with_nan(1.0)).differences

    def test_deterministic_states_give_the_exact_comparison_verdict(self):
        exact = ExactComparison()
        baseline = state()
        for candidate in (state(), state(shift=1e-3), state(lr=0.2), state(step=9)):
            envelope = judge_step(NoiseComparison(), [state(), state()], candidate)
            expected = exact.compare_all(baseline, candidate)
            assert [d.path for d in envelope.differences] == [d.path for d in expected]
