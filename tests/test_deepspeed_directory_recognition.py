"""Which reader the default observer picks for a directory: DCP, DeepSpeed ZeRO, or neither.

Recognition reads only names, so these run without deepspeed installed; the
DeepSpeed reader itself is tested on real ZeRO checkpoints in test_deepspeed.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed.checkpoint as dcp
from trainparity._internal.checkpoints.deepspeed_zero import is_deepspeed_checkpoint
from trainparity.checkpoints import load_checkpoint_directory


def _touch(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def test_the_layouts_engine_save_checkpoint_writes_are_recognised(tmp_path):
    with_latest = tmp_path / "with_latest"
    _touch(with_latest / "latest")
    tagged = tmp_path / "tagged"
    _touch(tagged / "global_step4" / "mp_rank_00_model_states.pt")
    zero3 = tmp_path / "zero3"
    _touch(zero3 / "global_step4" / "zero_pp_rank_0_mp_rank_00_model_states.pt")
    for directory in (with_latest, tagged, tagged / "global_step4", zero3):
        assert is_deepspeed_checkpoint(directory), directory
    plain = tmp_path / "plain"
    _touch(plain / "sub" / "model.pt")
    assert not is_deepspeed_checkpoint(plain)
    assert not is_deepspeed_checkpoint(tagged / "global_step4" / "mp_rank_00_model_states.pt")


@pytest.mark.filterwarnings(
    "ignore:torch.distributed is disabled:UserWarning"
)  # one process: meant
def test_a_dcp_directory_stays_dcp_even_with_a_file_named_latest(tmp_path):
    directory = tmp_path / "dcp"
    dcp.save({"weight": torch.arange(3.0)}, checkpoint_id=directory, no_dist=True)
    _touch(directory / "latest")
    assert torch.equal(load_checkpoint_directory(directory)["weight"], torch.arange(3.0))


def test_a_directory_of_neither_kind_says_what_a_dcp_directory_lacks(tmp_path):
    _touch(tmp_path / "notes.txt")
    with pytest.raises(
        FileNotFoundError, match=r"is not a DCP checkpoint directory \(no \.metadata\)"
    ):
        load_checkpoint_directory(tmp_path)
