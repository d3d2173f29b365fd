"""Hugging Face Trainer under trainparity: a callback, a case base class and a checkpoint observer.

In the training script::

    from trainparity._internal.integrations import huggingface as tp_hf

    args = TrainingArguments(output_dir=tp_hf.output_dir("out"), max_steps=8, ...)
    trainer = Trainer(model, args, ..., callbacks=[tp_hf.TrainParityCallback()])
    trainer.train(resume_from_checkpoint=tp_hf.resume_from())

Outside a check all three are no-ops (`output_dir` returns its argument,
`resume_from` None). `TrainParityCallback(id_column="id")` also records the
sample IDs of every batch the Trainer trains on (`record_ids`), read from
that column of the dataset's rows, so check_resume audits the data across
the resume (docs/coverage.md, "Data across resumes"). Under one, the callback stops the run at the plan's end
step without touching `max_steps` (which defines the LR schedule), has the
Trainer save its own complete checkpoint there and moves `checkpoint-<N>` to
the plan's checkpoint path. Under torchrun (DDP) every rank runs the
callback: all stop at the same end step, rank 0 moves the folder once every
rank has written its `rng_state_<rank>.pth` into it, and each rank records
its own trajectory.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from trainparity._internal.cases.phase_plan import PhasePlan, current_phase_plan
from trainparity._internal.checkpoints.deepspeed_zero import is_deepspeed_checkpoint, load_deepspeed
from trainparity._internal.integrations._common import (
    NeedsUnpickling,
    RecordingCollator,
    ScriptCase,
    file_fingerprint,
    ids_requested,
    load_json,
    load_safetensors,
    load_weights_only,
    record_step,
    recording_requested,
    require,
    without_run_dir,
)

transformers = require("huggingface", "transformers")

__all__ = [
    "HuggingFaceCase",
    "NeedsUnpickling",
    "TrainParityCallback",
    "observe_huggingface_checkpoint",
    "output_dir",
    "resume_from",
]

# What the Trainer writes into checkpoint-<N> (transformers 5.x) and how each file is read.
_TORCH_FILES = {"optimizer.pt": "optimizer", "scheduler.pt": "scheduler", "scaler.pt": "scaler"}
_JSON_FILES = {"config.json": "config", "generation_config.json": "generation_config"}
_PICKLED_FILES = {
    "training_args.bin": "pickled TrainingArguments: reading it needs full unpickling (not done); "
    "it holds the configuration, not training state"
}


def output_dir(default: str) -> str:
    """The Trainer's `output_dir`: `default`, or a directory of this phase's own under a check.

    Phases of a check run at the same time from the same working directory;
    a shared `output_dir` would mix their `checkpoint-<N>` folders.
    """
    plan = current_phase_plan()
    return default if plan is None else str(plan.run_dir / "trainer_output")


def resume_from() -> str | None:
    """`trainer.train(resume_from_checkpoint=...)`: the staged checkpoint when resuming, else None."""
    plan = current_phase_plan()
    return None if plan is None or plan.resume_from is None else str(plan.resume_from)


class TrainParityCallback(transformers.TrainerCallback):
    """Follows the phase plan: stop and save at its end step, publish the checkpoint, record steps.

    `state`, when given, is what each step records instead of the model's,
    optimizer's and scheduler's `state_dict()` (called only when a check
    records): under DeepSpeed, `lambda: trainparity.integrations.deepspeed.
    engine_state(trainer.model_wrapped)`.
    """

    def __init__(
        self,
        id_column: str | None = None,
        *,
        state: Callable[[], Mapping[str, object]] | None = None,
    ) -> None:
        self.plan: PhasePlan | None = current_phase_plan()
        self.state = state
        self.recording = recording_requested()
        self.published = False
        self.id_column = id_column
        self.epoch = 0
        self.collator: RecordingCollator | None = None

    def on_train_begin(self, args, state, control, train_dataloader=None, **kwargs):
        if ids_requested(self.id_column) and train_dataloader is not None:
            self._record_ids_of(train_dataloader)
        plan = self.plan
        if plan is not None and not Path(args.output_dir).resolve().is_relative_to(
            plan.run_dir.resolve()
        ):
            raise ValueError(
                f"output_dir {args.output_dir!r} is shared by the check's concurrent phases; "
                "use TrainingArguments(output_dir=trainparity.integrations.huggingface.output_dir(...))"
            )
        if self.recording and plan is not None and plan.resume_from is not None:
            # The round trip: what was loaded, at the split step, before any training.
            record_step(
                state.global_step,
                self.state
                or (lambda: _live_state(kwargs.get("model"), kwargs.get("optimizer"), kwargs)),
            )

    def _record_ids_of(self, loader: Any) -> None:
        """Have `loader` record its batches' IDs as it collates them (skip_first_batches copies it)."""
        if loader.num_workers:
            raise ValueError(
                f"TrainParityCallback(id_column={self.id_column!r}) records IDs as batches are "
                f"collated, which {loader.num_workers} dataloader workers do in other processes: "
                "set dataloader_num_workers=0 under a check, or pass id_column=None"
            )
        # accelerate's DataLoaderShard iterates the DataLoader it wraps: that one collates.
        collating = getattr(loader, "base_dataloader", loader)
        self.collator = RecordingCollator(
            collating.collate_fn, str(self.id_column), lambda: self.epoch
        )
        collating.collate_fn = self.collator

    def _record_trained_ids(self) -> None:
        """Record the batches this optimizer step trained on: all collated but the one ahead.

        accelerate's DataLoaderShard collates the next batch before it yields
        the current one (to know which is last), except at its end; the batch
        collated ahead when a phase stops is never trained on, and never recorded.
        """
        from accelerate.state import GradientState

        assert self.collator is not None
        ahead = 0 if GradientState().end_of_dataloader else 1
        self.collator.record(max(len(self.collator.pending) - ahead, 0))

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.epoch = int(state.epoch or 0)  # a resumed epoch starts at a fraction: its index
        return control

    def on_step_end(self, args, state, control, model=None, optimizer=None, **kwargs):
        if self.collator is not None:  # before record(), which places them at this step
            self._record_trained_ids()
        if self.recording:
            record_step(
                state.global_step, self.state or (lambda: _live_state(model, optimizer, kwargs))
            )
        if self.plan is not None and state.global_step >= self.plan.end_step:
            control.should_save = True
            control.should_training_stop = True
        return control

    def on_save(self, args, state, control, **kwargs):
        plan = self.plan
        if plan is None or self.published or state.global_step < plan.end_step:
            return control
        self.published = True
        # Every rank writes its own rng_state_<rank>.pth into checkpoint-<N>, and nothing in
        # _save_checkpoint waits for the others: rank 0 must not move the folder before they did.
        _barrier()
        if state.is_world_process_zero:
            source = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            _replace_directory(source, plan.checkpoint)
        _barrier()  # nobody exits (ending the phase) before the checkpoint is in place
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if self.plan is not None and not self.published:
            raise RuntimeError(
                f"training ended at step {state.global_step} before the plan's end step "
                f"{self.plan.end_step}: is max_steps at least the case's total_step?"
            )
        return control


def _live_state(model: Any, optimizer: Any, extra: Mapping[str, Any]) -> dict[str, object]:
    state: dict[str, object] = {"model": model.state_dict()}
    if optimizer is not None:
        state["optimizer"] = optimizer.state_dict()
    scheduler = extra.get("lr_scheduler")
    if scheduler is not None:
        state["scheduler"] = scheduler.state_dict()
    return state


def _replace_directory(source: Path, target: Path) -> None:
    if not source.is_dir():
        raise RuntimeError(f"the Trainer did not write {source}")
    if target.exists():  # candidate_resume: the staged input it just resumed from
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(source), str(target))


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def observe_huggingface_checkpoint(
    path: Path, *, run_dir: Path | None = None, log_history: bool = True
) -> dict[str, object]:
    """Every file of a Trainer `checkpoint-<N>` folder as one observation.

    | key | file | read with |
    | --- | --- | --- |
    | `model` | `model.safetensors`, or the shards of `model.safetensors.index.json` (`pytorch_model*.bin`: weights_only) | safetensors |
    | `optimizer`, `scheduler`, `scaler` | `optimizer.pt`, `scheduler.pt`, `scaler.pt` | `torch.load(weights_only=True)` |
    | `rng` | `rng_state.pth` / `rng_state_<rank>.pth`, by file stem | `weights_only=True`, numpy arrays allowed |
    | `trainer_state` | `trainer_state.json` without `log_history` | json |
    | `log_history` | its logged losses, grad norms and learning rates per step | json |
    | `config`, `generation_config` | the model's JSON configs | json |
    | `files` | any other file (tokenizer, ...): size and SHA-256 | bytes |
    | `not_observed` | files that need full unpickling (`training_args.bin`), with the reason | - |
    | `deepspeed` | a DeepSpeed engine's `latest` and `global_step<N>/` (`TrainingArguments(deepspeed=...)`) | `load_deepspeed` |

    `log_history` is a top-level key so that it sorts before `model`: a
    run whose data or loss went wrong first shows at the step whose logged
    loss differs (`log_history[3].loss`). Turn it off (`log_history=False`)
    when the split step is not a multiple of `logging_steps`: the Trainer
    then logs an average over a different number of steps after resuming.
    Strings holding the phase's run directory (`run_dir`, default: the
    checkpoint's parent) are rewritten as `<run_dir>`.
    """
    path = Path(path)
    run_dir = path.parent if run_dir is None else Path(run_dir)
    observation: dict[str, object] = {}
    not_observed: dict[str, str] = {}
    files: dict[str, object] = {}
    model: dict[str, object] = {}
    rng: dict[str, object] = {}
    handled = set()
    index = path / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(load_json(index)["weight_map"].values()))
        for shard in shards:
            model.update(load_safetensors(path / shard))
        handled.update({index.name, *shards})
    for entry in sorted(path.iterdir()):
        name = entry.name
        if name in handled:
            continue
        if entry.is_dir():
            files[name] = "directory (not observed)"
        elif name.endswith(".safetensors") and name.startswith(("model", "adapter_model")):
            model.update(load_safetensors(entry))
        elif name.startswith("pytorch_model") and name.endswith(".bin"):
            model.update(load_weights_only(entry))
        elif name in _TORCH_FILES:
            observation[_TORCH_FILES[name]] = load_weights_only(entry)
        elif name.startswith("rng_state") and name.endswith(".pth"):
            rng[entry.stem] = load_weights_only(entry)
        elif name == "trainer_state.json":
            trainer_state = load_json(entry)
            history = trainer_state.pop("log_history", [])
            observation["trainer_state"] = trainer_state
            if log_history:
                observation["log_history"] = history
        elif name in _JSON_FILES:
            observation[_JSON_FILES[name]] = load_json(entry)
        elif name in _PICKLED_FILES:
            not_observed[name] = _PICKLED_FILES[name]
        else:
            files[name] = file_fingerprint(entry)
    observation["model"] = model
    if is_deepspeed_checkpoint(path):
        # Trainer(args.deepspeed=...) saves the engine's checkpoint in the same folder (`latest`,
        # `global_step<N>/`): the fp32 master weights, optimizer and scheduler live there.
        observation["deepspeed"] = load_deepspeed(path)
    if rng:
        observation["rng"] = rng
    if files:
        observation["files"] = files
    if not_observed:
        observation["not_observed"] = not_observed
    return without_run_dir(observation, run_dir)  # type: ignore[return-value]


class HuggingFaceCase(ScriptCase):
    """A resume case around a Trainer script that uses TrainParityCallback: set `script` and steps.

    `observe_log_history = False` leaves the logged losses out (see
    `observe_huggingface_checkpoint`).
    """

    observe_log_history = True

    def observe_checkpoint(self, path: Path) -> Mapping[str, object]:
        return observe_huggingface_checkpoint(path, log_history=self.observe_log_history)
