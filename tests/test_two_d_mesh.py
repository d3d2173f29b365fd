"""2-D meshes: FSDP2 x TP and HSDP shards recorded as local shard plus placement, reassembled exactly.

One module fixture forks 4 real gloo ranks once (tests/fixtures/two_d_mesh_ranks.py):
each writes snapshots of its own shards, rank 0 the gathered full tensors
(torch's full_tensor()), which every reassembly here is held to.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from trainparity import Outcome, compare_states
from trainparity._internal.state.placement import ShardPlacement
from trainparity._internal.state.reassembly import ReassemblyError, global_state
from trainparity._internal.state.snapshot import Snapshot
from trainparity._internal.state.snapshot_file import read_snapshot
from trainparity.state import FrozenMapping, FrozenTensor, freeze

RANKS_SCRIPT = Path(__file__).resolve().parent / "fixtures" / "two_d_mesh_ranks.py"
RANKS = 4


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("two_d_mesh")
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(out)}
    done = subprocess.run(
        [sys.executable, str(RANKS_SCRIPT), str(out)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def _ranks(written: Path, name: str) -> list[FrozenMapping]:
    return [
        read_snapshot(written / f"{name}-rank{rank}.safetensors")[0].state for rank in range(RANKS)
    ]


def _tensor(state: FrozenMapping, *keys: str) -> FrozenTensor:
    value: object = state
    for key in keys:
        value = value.as_dict()[key]  # type: ignore[attr-defined]
    assert isinstance(value, FrozenTensor)
    return value


def _snapshot(state: object) -> Snapshot:
    return Snapshot(step=1, state=state if isinstance(state, FrozenMapping) else freeze(state))


@pytest.mark.parametrize("name", ["tp", "hsdp", "interleaved"])
def test_shards_of_a_two_d_mesh_reassemble_to_torchs_full_tensors(written, name):
    truth = torch.load(written / f"truth-{name}.pt", weights_only=True)
    reassembled = global_state(_ranks(written, name))
    comparison = compare_states(_snapshot(truth), _snapshot(reassembled))
    assert comparison.outcome is Outcome.PASS, comparison.differences[:3]


def test_fsdp_over_tp_records_its_strided_shard_as_local_rows_and_their_runs(written):
    ranks = _ranks(written, "tp")
    colwise = [_tensor(state, "model", "0.weight").placement for state in ranks]
    assert {placement.placements for placement in colwise} == {
        ("_StridedShard(dim=0, sf=2)", "Shard(dim=0)")
    }
    # Rank r sits at mesh coordinate (r // 2, r % 2); dp splits each TP half of the 8 rows.
    assert [(p.coordinate, p.index_runs) for p in colwise] == [
        ((0, 0), ((0, ((0, 2),)),)),
        ((0, 1), ((0, ((4, 2),)),)),
        ((1, 0), ((0, ((2, 2),)),)),
        ((1, 1), ((0, ((6, 2),)),)),
    ]
    rowwise = _tensor(ranks[3], "model", "2.weight")
    assert rowwise.shape == (3, 4)
    assert rowwise.placement.placements == ("Shard(dim=0)", "Shard(dim=1)")
    assert rowwise.placement.index_runs == ()  # a block at its offsets, written as before
    moment = _tensor(ranks[1], "optim", "state", "0.weight", "exp_avg").placement
    assert moment.index_runs == colwise[1].index_runs


def test_an_interleaved_shard_keeps_both_runs_of_its_rows(written):
    first = _tensor(_ranks(written, "interleaved")[0], "values")
    # 10 rows, split factor 2, 2 dp ranks: rows 0..2 and 5..7 (uneven: rank (1, *) has 2 + 2).
    assert first.placement.index_runs == ((0, ((0, 3), (5, 3))),)
    assert first.to_tensor()[:, 0].tolist() == [0.0, 6.0, 12.0, 30.0, 36.0, 42.0]
    assert "dim 0 rows 0..2, 5..7" in first.placement.describe()


def test_hsdp_replicas_hold_the_same_shard_and_are_taken_once(written):
    ranks = _ranks(written, "hsdp")
    placements = [_tensor(state, "model", "0.weight").placement for state in ranks]
    assert {p.placements for p in placements} == {("Replicate()", "Shard(dim=0)")}
    # Ranks 0 and 2 differ only on the replicate dimension: the same rows, the same bytes.
    assert placements[0].offsets == placements[2].offsets
    assert (
        _tensor(ranks[0], "model", "0.weight").digest
        == _tensor(ranks[2], "model", "0.weight").digest
    )


def test_a_shard_loaded_as_replicate_is_a_layout_difference_not_a_value_pass(written):
    sharded, replicated = _ranks(written, "tp"), _ranks(written, "replicated")
    per_rank = compare_states(_snapshot(sharded[1]), _snapshot(replicated[1]))
    assert per_rank.outcome is Outcome.FAIL
    reasons = {difference.path: difference.reason for difference in per_rank.differences}
    assert reasons['model["0.weight"]'] == "tensor_placement"
    assert set(reasons.values()) == {"tensor_placement"}
    # The values themselves agree: only the layout differs.
    on_values = compare_states(
        _snapshot(global_state(sharded)), _snapshot(global_state(replicated))
    )
    assert on_values.outcome is Outcome.PASS


def test_a_partial_dtensor_is_recorded_but_not_reassembled(written):
    ranks = _ranks(written, "partial")
    placement = _tensor(ranks[2], "partial").placement
    assert placement.placements == ("Partial(sum)", "Replicate()")
    assert _tensor(ranks[2], "partial").to_tensor().tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(ReassemblyError, match=r"partial is a Partial \(unreduced\) DTensor"):
        global_state(ranks)


def test_a_placement_written_before_index_runs_existed_still_reads():
    entry = {
        "kind": "dtensor",
        "mesh_shape": [2],
        "placements": ["Shard(dim=0)"],
        "coordinate": [1],
        "global_shape": [5, 2],
        "offsets": [3, 0],
    }
    placement = ShardPlacement.from_json(entry)
    assert placement.index_runs == ()
    assert placement.as_json() == entry  # and a block is written exactly as before


@pytest.mark.parametrize(
    "runs",
    [[[0, [[4, 3]]]], [[2, [[0, 1]]]], [[0, [[0]]]], "rows", [[0, [[-1, 2]]]]],
)
def test_malformed_index_runs_are_refused(runs):
    entry = {
        "kind": "dtensor",
        "mesh_shape": [2],
        "placements": ["_StridedShard(dim=0, sf=2)"],
        "coordinate": [0],
        "global_shape": [6, 2],
        "offsets": [0, 0],
        "index_runs": runs,
    }
    with pytest.raises(ValueError, match="index runs|size list"):
        ShardPlacement.from_json(entry)
