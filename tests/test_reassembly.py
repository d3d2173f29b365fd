"""state/reassembly.py: one global state from every rank's shards (the elastic comparison's basis)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from trainparity._internal.state.placement import ShardPlacement
from trainparity._internal.state.reassembly import ReassemblyError, global_state
from trainparity._internal.state.summaries import summarize_tensor
from trainparity.state import FrozenMapping, FrozenTensor

WHOLE = torch.arange(7 * 3, dtype=torch.float32).reshape(7, 3)


def _shard(rows: slice, coordinate: int, ranks: int, placement: str = "Shard(dim=0)"):
    local = WHOLE[rows]
    frozen = FrozenTensor.capture(local)
    return dataclasses.replace(
        frozen,
        placement=ShardPlacement(
            kind="dtensor",
            mesh_shape=(ranks,),
            placements=(placement,),
            coordinate=(coordinate,),
            global_shape=(7, 3),
            offsets=(rows.start, 0),
        ),
    )


def _state(tensor, step=3):
    return FrozenMapping((("step", step), ("weight", tensor)))


def test_uneven_shards_are_put_back_at_their_offsets():
    states = [_state(_shard(slice(0, 4), 0, 2)), _state(_shard(slice(4, 7), 1, 2))]
    whole = global_state(states).as_dict()["weight"]
    assert whole.placement is None and whole.shape == (7, 3)
    assert torch.equal(whole.to_tensor(), WHOLE)
    assert global_state(states).as_dict()["step"] == 3


def test_the_same_tensor_from_three_ranks_equals_it_from_two():
    three = [
        _state(_shard(slice(0, 3), 0, 3)),
        _state(_shard(slice(3, 6), 1, 3)),
        _state(_shard(slice(6, 7), 2, 3)),
    ]
    two = [_state(_shard(slice(0, 4), 0, 2)), _state(_shard(slice(4, 7), 1, 2))]
    left = global_state(three).as_dict()["weight"]
    right = global_state(two).as_dict()["weight"]
    assert bytes(left.data) == bytes(right.data)


def test_summaries_combine_over_distinct_shards_only():
    shards = [_shard(slice(0, 4), 0, 2), _shard(slice(4, 7), 1, 2)]
    summaries = [summarize_tensor(shard.dtype, shard.data) for shard in shards]
    states = [_state(dataclasses.replace(shard, data=None)) for shard in shards]
    combined = global_state(states, summaries=lambda rank, name: summaries[rank]).as_dict()
    weight = combined["weight"].as_dict()
    assert weight["count"] == 21
    assert weight["sum"] == float(WHOLE.sum())
    assert math.isclose(weight["l2_norm"], float(WHOLE.double().norm()), rel_tol=1e-12)
    assert weight["max_abs"] == 20.0
    # Replicas (a Replicate mesh dimension) hold the same shard: counted once.
    replica = _shard(slice(0, 7), 0, 2, "Replicate()")
    whole = summarize_tensor(replica.dtype, replica.data)
    replicated = [
        _state(replica),
        _state(
            dataclasses.replace(
                replica, placement=dataclasses.replace(replica.placement, coordinate=(1,))
            )
        ),
    ]
    counted = global_state(replicated, summaries=lambda rank, name: whole).as_dict()["weight"]
    assert counted.as_dict()["count"] == 21


@pytest.mark.parametrize(
    ("states", "named"),
    [
        ([_state(_shard(slice(0, 4), 0, 2))] * 2, "cover 12 of 21 elements"),
        ([_state(_shard(slice(0, 4), 0, 2, "Partial(sum)"))] * 2, "Partial"),
        ([_state(_shard(slice(0, 4), 0, 2)), _state(_shard(slice(0, 7), 0, 1))], "differently"),
        ([_state(_shard(slice(0, 4), 0, 2)), FrozenMapping((("step", 3),))], "different keys"),
    ],
)
def test_what_cannot_be_put_together_is_named(states, named):
    with pytest.raises(ReassemblyError, match=named):
        global_state(states)
