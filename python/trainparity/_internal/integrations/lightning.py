"""Lightning under trainparity: a callback, a case base class and a `.ckpt` observer.

In the training script::

    from trainparity._internal.integrations import lightning as tp_pl

    trainer = L.Trainer(max_steps=8, default_root_dir=tp_pl.root_dir("runs"),
                        callbacks=[tp_pl.TrainParityCallback()])
    trainer.fit(model, loader, ckpt_path=tp_pl.ckpt_path())

Outside a check these are no-ops. Under one, the callback saves Lightning's
own complete checkpoint (`trainer.save_checkpoint`) at the plan's end step
and stops the run there, without changing `max_steps` or the schedule.

It saves in `on_train_batch_end`, where `ModelCheckpoint(every_n_train_steps=
...)` saves. It is a `Checkpoint` callback, so Lightning runs it after every
other callback's `on_train_batch_end`, as it does for `ModelCheckpoint`. Under
torchrun with `strategy="ddp"` every rank runs the callback and calls
`save_checkpoint`, as Lightning requires: it writes the file from rank 0 only
and waits for every rank. Works with `lightning` (`lightning.pytorch`) or the
standalone `pytorch_lightning`.

`TrainParityCallback(id_column="id")` also records the sample IDs of every
batch it trains on (`record_ids`, that field of the batch, the epoch
Lightning's), so check_resume audits the data across the resume.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainparity._internal.cases.phase_plan import PhasePlan, current_phase_plan
from trainparity._internal.integrations._common import (
    NeedsUnpickling,
    ScriptCase,
    batch_ids,
    ids_requested,
    load_weights_only,
    record_step,
    recording_requested,
    require,
    without_run_dir,
)
from trainparity._internal.recording.record_ids import record_ids

pl = require("lightning", "lightning.pytorch", "pytorch_lightning")

__all__ = [
    "LightningCase",
    "NeedsUnpickling",
    "TrainParityCallback",
    "ckpt_path",
    "observe_lightning_checkpoint",
    "root_dir",
]


def root_dir(default: str) -> str:
    """The Trainer's `default_root_dir`: `default`, or this phase's own directory under a check.

    Phases run at the same time from one working directory; a shared root
    would mix their logs and ModelCheckpoint files.
    """
    plan = current_phase_plan()
    return default if plan is None else str(plan.run_dir / "lightning_root")


def ckpt_path() -> str | None:
    """`trainer.fit(..., ckpt_path=...)`: the staged checkpoint when resuming, else None."""
    plan = current_phase_plan()
    return None if plan is None or plan.resume_from is None else str(plan.resume_from)


class TrainParityCallback(pl.callbacks.Checkpoint):
    """Follows the phase plan: save with `trainer.save_checkpoint` and stop at its end step."""

    def __init__(self, id_column: str | int | None = None) -> None:
        self.plan: PhasePlan | None = current_phase_plan()
        self.recording = recording_requested()
        self.saved = False
        self.last_recorded_step = -1
        self.recording_ids = ids_requested(id_column)
        self.id_column = id_column

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.recording_ids:  # the batch Lightning is about to train on, as it arrives
            record_ids(batch_ids(batch, self.id_column), epoch=trainer.current_epoch)

    def on_train_start(self, trainer, pl_module) -> None:
        if self.recording and self.plan is not None and self.plan.resume_from is not None:
            # The round trip: what was restored, at the split step, before any training.
            self.last_recorded_step = trainer.global_step
            record_step(trainer.global_step, lambda: _live_state(trainer, pl_module))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if self.recording and step != self.last_recorded_step:  # once per optimizer step
            self.last_recorded_step = step
            record_step(step, lambda: _live_state(trainer, pl_module))
        if self.plan is not None and not self.saved and step >= self.plan.end_step:
            trainer.save_checkpoint(self.plan.checkpoint)
            self.saved = True
            trainer.should_stop = True

    def on_train_end(self, trainer, pl_module) -> None:
        if self.plan is not None and not self.saved:
            raise RuntimeError(
                f"training ended at step {trainer.global_step} before the plan's end step "
                f"{self.plan.end_step}: is max_steps at least the case's total_step?"
            )


def _live_state(trainer: Any, module: Any) -> dict[str, object]:
    return {
        "model": module.state_dict(),
        "optimizers": [optimizer.state_dict() for optimizer in trainer.optimizers],
        "lr_schedulers": [config.scheduler.state_dict() for config in trainer.lr_scheduler_configs],
    }


def observe_lightning_checkpoint(
    path: Path, *, run_dir: Path | None = None, allow_unpickling: bool = False
) -> dict[str, object]:
    """A Lightning `.ckpt` as one observation: every key it holds.

    `state_dict` (model), `optimizer_states`, `lr_schedulers`, `loops` (the
    fit loop's epoch and batch progress: the data position), `callbacks`
    (each stateful callback's `state_dict`, keyed by its state key),
    `epoch`, `global_step`, precision-plugin and datamodule state, and
    `hyper_parameters`. Read with `torch.load(weights_only=True)`; a
    checkpoint whose hyper-parameters hold arbitrary objects raises
    NeedsUnpickling unless `allow_unpickling=True`, in which case the file
    is fully unpickled (run only on checkpoints you trust) and the
    observation says so under `not_weights_only`. Lightning does not save
    RNG states; a run that draws random numbers after the split shows its
    divergence in the model. Strings holding the phase's run directory
    (`run_dir`, default: the checkpoint's directory) become `<run_dir>`.

    `path` may be a ModelCheckpoint directory: the file read is then the one
    `trainer.fit(..., ckpt_path="last")` would load, the newest `last*.ckpt`.
    In the run directory's checkpoint names, Lightning's version suffix is
    dropped (`last-v1.ckpt` reads `last.ckpt`): a run resumed from a checkpoint
    staged into another directory cannot reload ModelCheckpoint's file
    bookkeeping ("The dirpath has changed") and versions the next name.
    """
    path = Path(path)
    if path.is_dir():
        path = newest_last_checkpoint(path)
    run_dir = path.parent if run_dir is None else Path(run_dir)
    try:
        checkpoint = load_weights_only(path)
        observation = dict(checkpoint)
    except NeedsUnpickling as refusal:
        if not allow_unpickling:
            raise
        import torch

        checkpoint = torch.load(path, map_location="cpu", weights_only=False)
        observation = dict(checkpoint)
        observation["not_weights_only"] = f"{path.name}: {refusal}"
    return _unversioned(without_run_dir(observation, run_dir))  # type: ignore[return-value]


def newest_last_checkpoint(directory: Path) -> Path:
    """The `last*.ckpt` in `directory` that `ckpt_path="last"` resumes from: the newest."""
    found = sorted(
        Path(directory).glob("last*.ckpt"), key=lambda file: (file.stat().st_mtime, file.name)
    )
    if not found:
        raise FileNotFoundError(
            f"no last*.ckpt in {directory}: give ModelCheckpoint save_last=True, or observe a "
            "checkpoint file by its path"
        )
    return found[-1]


# `<run_dir>/.../name-v3.ckpt`: a checkpoint name Lightning versioned to keep an older file.
_VERSIONED = re.compile(r"^(<run_dir>.*?)-v\d+\.ckpt$")


def _unversioned(value: object) -> object:
    if isinstance(value, str):
        return _VERSIONED.sub(r"\1.ckpt", value)
    if isinstance(value, Mapping):
        return {_unversioned(key): _unversioned(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_unversioned(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_unversioned(item) for item in value)
    return value


class LightningCase(ScriptCase):
    """A resume case around a Lightning script that uses TrainParityCallback: set `script` and steps."""

    checkpoint_name = "checkpoint.ckpt"
    allow_unpickling = False

    def observe_checkpoint(self, path: Path) -> Mapping[str, object]:
        return observe_lightning_checkpoint(path, allow_unpickling=self.allow_unpickling)
