"""The observers on files written here by the real libraries: sharded models, unpicklable files, paths."""

from __future__ import annotations

import json

import pytest
import torch
from trainparity._internal.cases.phase_plan import current_phase_plan, plan_environment
from trainparity._internal.integrations._common import (
    NeedsUnpickling,
    load_weights_only,
    without_run_dir,
)


def test_phase_plan_round_trips_through_the_environment(tmp_path):
    variables = plan_environment(
        phase="candidate_resume",
        end_step=8,
        checkpoint=tmp_path / "checkpoint",
        run_dir=tmp_path,
        resume_from=tmp_path / "checkpoint",
    )
    plan = current_phase_plan(variables)
    assert (plan.phase, plan.end_step, plan.checkpoint, plan.resume_from) == (
        "candidate_resume",
        8,
        tmp_path / "checkpoint",
        tmp_path / "checkpoint",
    )
    assert current_phase_plan({}) is None
    with pytest.raises(ValueError, match="TRAINPARITY_CHECKPOINT"):
        current_phase_plan({"TRAINPARITY_PHASE": "x", "TRAINPARITY_END_STEP": "1"})
    with pytest.raises(ValueError, match="integer"):
        current_phase_plan({**variables, "TRAINPARITY_END_STEP": "eight"})


class Opaque:
    """Any class: weights_only=True refuses to rebuild it."""


def test_a_pickled_object_is_refused_by_name_not_unpickled(tmp_path):
    path = tmp_path / "sampler.bin"
    torch.save({"sampler": Opaque()}, path)
    with pytest.raises(NeedsUnpickling, match="sampler.bin cannot be read with weights_only=True"):
        load_weights_only(path)


def test_run_directory_strings_are_rewritten(tmp_path):
    value = {"best": str(tmp_path / "ckpt"), "other": ["x", (str(tmp_path),)], 3: 1.5}
    assert without_run_dir(value, tmp_path) == {
        "best": "<run_dir>/ckpt",
        "other": ["x", ("<run_dir>",)],
        3: 1.5,
    }


def test_huggingface_observer_reads_a_sharded_model_and_names_training_args(tmp_path):
    transformers = pytest.importorskip("transformers")
    from trainparity.integrations.huggingface import observe_huggingface_checkpoint

    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=64, n_layer=1, n_head=2)
    model = transformers.GPT2LMHeadModel(config)
    checkpoint = tmp_path / "checkpoint"
    model.save_pretrained(checkpoint, max_shard_size="60KB")
    assert (checkpoint / "model.safetensors.index.json").is_file()
    (checkpoint / "training_args.bin").write_bytes(b"pickled")
    (checkpoint / "trainer_state.json").write_text(
        json.dumps({"global_step": 3, "log_history": [{"loss": 1.0, "step": 1}]})
    )
    observed = observe_huggingface_checkpoint(checkpoint)
    state = model.state_dict()
    stored = {name for name in state if name != "lm_head.weight"}  # tied to the embedding
    assert set(observed["model"]) == stored
    assert torch.equal(observed["model"]["transformer.wte.weight"], state["transformer.wte.weight"])
    assert observed["log_history"] == [{"loss": 1.0, "step": 1}]
    assert observed["trainer_state"] == {"global_step": 3}
    assert "training_args.bin" in observed["not_observed"]
    assert "model.safetensors.index.json" not in observed.get("files", {})
