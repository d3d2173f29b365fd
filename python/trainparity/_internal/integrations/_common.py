"""What the library integrations share: the case base class, safe file reads, the trajectory hook."""

from __future__ import annotations

import hashlib
import importlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from trainparity._internal.cases.phase_plan import plan_command, plan_environment
from trainparity._internal.protocols import ProcessExecutionPlan
from trainparity._internal.recording.record_ids import IDS_DIR_VARIABLE, record_ids
from trainparity._internal.recording.variables import RECORD_VARIABLE

RUN_DIR_PLACEHOLDER = "<run_dir>"


def require(extra: str, *module_names: str) -> ModuleType:
    """The first of `module_names` that imports, or ImportError naming the extra to install."""
    for name in module_names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError(
        f"trainparity.integrations.{extra} needs {' or '.join(module_names)}: "
        f"pip install 'trainparity[{extra}]'"
    )


class ScriptCase:
    """A resume (and `check_runs`) case around one training script that follows the phase plan.

    Subclasses set `name`, `split_step`, `total_step` and `script`, the
    arguments after the Python interpreter (`["train.py", "--lr", "1e-3"]`,
    or `["-m", "torch.distributed.run", "--nproc-per-node=2", "train.py"]`),
    relative to the check's `cwd`. `command` runs it with the phase plan in
    its environment; the checkpoint is `<run_dir>/checkpoint`, where the
    integration's callback or helper publishes it.
    """

    name: str
    split_step: int
    total_step: int
    script: Sequence[str] = ()
    checkpoint_name = "checkpoint"

    def command(self, plan: ProcessExecutionPlan) -> list[str]:
        if isinstance(self.script, str) or not self.script:
            raise TypeError(
                f"{type(self).__name__}.script must be a non-empty list of arguments after python"
            )
        variables = plan_environment(
            phase=plan.phase,
            end_step=plan.end_step,
            checkpoint=self.checkpoint_path(plan.run_dir),
            run_dir=plan.run_dir,
            resume_from=plan.resume_from,
        )
        return plan_command([sys.executable, *self.script], variables)

    def checkpoint_path(self, run_dir: Path) -> Path:
        return run_dir / self.checkpoint_name

    def observe_checkpoint(self, path: Path) -> Mapping[str, object]:
        raise NotImplementedError(f"{type(self).__name__} must define observe_checkpoint")


def numpy_safe_globals() -> list[Any]:
    """The numpy objects a weights-only load may rebuild: arrays of RNG states (as the libraries do)."""
    try:
        import numpy
    except ImportError:
        return []
    core = getattr(numpy, "_core", None) or numpy.core
    return [
        core.multiarray._reconstruct,
        numpy.ndarray,
        numpy.dtype,
        type(numpy.dtype(numpy.uint32)),
    ]


class NeedsUnpickling(ValueError):
    """A file that `torch.load(weights_only=True)` refuses: reading it would run arbitrary pickle."""


def load_weights_only(path: Path) -> Any:
    """`torch.load(path, weights_only=True)` with numpy arrays allowed; NeedsUnpickling otherwise."""
    import pickle

    import torch

    with torch.serialization.safe_globals(numpy_safe_globals()):
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as error:
            reason = str(error).strip().splitlines()[0] if str(error).strip() else "refused"
            raise NeedsUnpickling(
                f"{path.name} cannot be read with weights_only=True ({reason})"
            ) from error


def load_safetensors(path: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(path), device="cpu")


def load_json(path: Path) -> Any:
    import json

    return json.loads(path.read_text(encoding="utf-8"))


def file_fingerprint(path: Path) -> dict[str, object]:
    """Size and SHA-256 of a file no observer understands: still observed, byte for byte."""
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return {"bytes": path.stat().st_size, "sha256": digest.hexdigest()}


def without_run_dir(value: object, run_dir: Path) -> object:
    """`value` with the phase's own directory in strings replaced by `<run_dir>`.

    Libraries store output paths in their state (Lightning's ModelCheckpoint,
    the Trainer's best checkpoint); every phase has its own run directory, so
    the paths differ by construction and would hide the differences that matter.
    """
    prefix = str(run_dir)
    if isinstance(value, str):
        return value.replace(prefix, RUN_DIR_PLACEHOLDER) if prefix in value else value
    if isinstance(value, Mapping):
        return {
            without_run_dir(key, run_dir): without_run_dir(item, run_dir)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [without_run_dir(item, run_dir) for item in value]
    if isinstance(value, tuple):
        return tuple(without_run_dir(item, run_dir) for item in value)
    return value


def recording_requested() -> bool:
    """Whether the check asked this process for a per-step trajectory (`TRAINPARITY_RECORD`)."""
    return bool(os.environ.get(RECORD_VARIABLE))


def record_step(step: int, build_state: Callable[[], Mapping[str, object]]) -> None:
    """`trainparity.record(step, state)`, with the state built only when a check records.

    Callers check `recording_requested()` first; record() itself also does
    nothing without a recording request, but building the state (a copy of
    the model's and optimizer's tensors) would cost a step's worth of time.
    """
    from trainparity._internal.recording.recorder import (
        record,  # on first use, as trainparity.record
    )

    if recording_requested():
        record(step, build_state())


def ids_requested(id_column: str | int | None) -> bool:
    """Whether a callback given `id_column` records sample IDs: a column named, under a check."""
    return id_column is not None and bool(os.environ.get(IDS_DIR_VARIABLE))


def batch_ids(batch: Any, id_column: str | int) -> Any:
    """The IDs of a collated batch: its `id_column` field (a dict key, or a tuple's index)."""
    try:
        return batch[id_column]
    except (KeyError, IndexError, TypeError) as error:
        raise ValueError(
            f"the training batch has no ID column {id_column!r} ({type(batch).__name__}"
            f"{' with keys ' + repr(sorted(map(str, batch))) if isinstance(batch, Mapping) else ''}): "
            "have the dataset return the sample's stable ID under that name, or pass id_column=None"
        ) from error


class RecordingCollator:
    """A collate function that notes the ID column of the rows it collates, then drops it.

    For trainers whose callbacks never see a batch (the Hugging Face
    Trainer): the rows of a batch pass through the collator once, in the
    order the loader yields them, when the loader collates in the training
    process (no workers). A loader may collate ahead of what it trains on,
    so the IDs wait in `pending` as (epoch, IDs) until the callback knows
    which batches were trained. The column is dropped so the model never
    receives it.
    """

    def __init__(
        self, collate: Callable[[list[Any]], Any], id_column: str, epoch: Callable[[], int]
    ) -> None:
        self.collate = collate
        self.id_column = id_column
        self.epoch = epoch
        self.pending: list[tuple[int, list[Any]]] = []

    def __call__(self, rows: list[Any]) -> Any:
        self.pending.append((self.epoch(), [batch_ids(row, self.id_column) for row in rows]))
        return self.collate(
            [{key: value for key, value in row.items() if key != self.id_column} for row in rows]
        )

    def record(self, batches: int) -> None:
        """Record the first `batches` pending batches (trained on) with `record_ids`."""
        for epoch, ids in self.pending[:batches]:
            record_ids(ids, epoch=epoch)
        del self.pending[:batches]
