"""ZeRO fragments as PlacedShards, without DeepSpeed: frozen with their placement, reassembled by it."""

from __future__ import annotations

import pytest
import torch
from trainparity import Outcome, compare_states
from trainparity._internal.state.freeze import UnsupportedStateError, freeze
from trainparity._internal.state.placement import PlacedShard, ShardPlacement
from trainparity._internal.state.reassembly import global_state


def _fragment(whole: torch.Tensor, start: int, length: int, rank: int, world: int) -> PlacedShard:
    placement = ShardPlacement(
        kind="zero_fragment",
        mesh_shape=(world,),
        placements=("ZeroFragment(stage=2)",),
        coordinate=(rank,),
        global_shape=(whole.numel(),),
        offsets=(start,),
    )
    return PlacedShard(whole.flatten().narrow(0, start, length), placement)


def test_fragments_of_two_ranks_reassemble_to_the_flat_parameter_of_one():
    weight = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    # Rank 0 holds the first 7 elements, rank 1 the last 5; an empty fragment is held nowhere.
    ranks = [
        {"w": _fragment(weight, 0, 7, 0, 2), "b": _fragment(torch.ones(2), 0, 0, 0, 2)},
        {"w": _fragment(weight, 7, 5, 1, 2), "b": _fragment(torch.ones(2), 0, 2, 1, 2)},
    ]
    frozen = [freeze(state, copy=False) for state in ranks]
    assert frozen[1].as_dict()["w"].placement.offsets == (7,)
    assert frozen[1].as_dict()["w"].shape == (5,)
    whole = global_state(frozen).as_dict()
    one_rank = global_state([freeze({"w": _fragment(weight, 0, 12, 0, 1)})]).as_dict()
    assert torch.equal(whole["w"].to_tensor(), weight.flatten())
    assert torch.equal(whole["w"].to_tensor(), one_rank["w"].to_tensor())
    assert torch.equal(whole["b"].to_tensor(), torch.ones(2))


def test_a_fragment_that_does_not_fit_its_placement_is_unsupported_state():
    fragment = _fragment(torch.zeros(8), 6, 2, 1, 2)
    too_long = PlacedShard(torch.zeros(3), fragment.placement)
    with pytest.raises(UnsupportedStateError, match=r"does not fit in its global shape \[8\]"):
        freeze({"w": too_long})
    flat_rank = PlacedShard(torch.zeros(1, 2), fragment.placement)
    with pytest.raises(UnsupportedStateError, match=r"at fp32\.w"):
        freeze({"fp32": {"w": flat_rank}})


def test_equal_values_at_another_offset_are_a_placement_difference():
    flat = torch.arange(8, dtype=torch.float32)
    here, shifted = _fragment(flat, 6, 2, 1, 2), _fragment(flat, 5, 2, 1, 2)
    same_values = PlacedShard(torch.tensor([6.0, 7.0]), shifted.placement)
    result = compare_states({"w": here}, {"w": same_values})
    assert result.outcome is Outcome.FAIL
    assert result.first_difference.reason == "tensor_placement"
    assert "offsets [6]" in result.first_difference.baseline
    assert "offsets [5]" in result.first_difference.candidate
    assert compare_states({"w": here}, {"w": _fragment(flat, 6, 2, 1, 2)}).outcome is Outcome.PASS
