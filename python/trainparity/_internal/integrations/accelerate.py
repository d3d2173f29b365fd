"""Accelerate under trainparity: a loop helper, a case base class and a `save_state` observer.

In the training script::

    from trainparity._internal.integrations import accelerate as tp_acc

    run = tp_acc.PhaseRun(accelerator)
    run.resume()                      # accelerator.load_state(<staged checkpoint>) when resuming
    for batch in loader:
        ...                           # forward, backward, optimizer.step(), scheduler.step()
        step += 1
        if run.step_end(step):        # at the plan's end step: accelerator.save_state(<checkpoint>)
            break

`run.track(batches, id_column="id", epoch=epoch)` wraps what the loop
iterates (the prepared loader, or `skip_first_batches`' result) so that the
IDs of every batch it trains on are recorded (`track_ids`), and check_resume
audits the data across the resume.

Outside a check `resume()` does nothing, `step_end` returns False and
`track` returns its loader. The
script keeps its own step counter and data position (e.g. a registered
object and `accelerator.skip_first_batches`): those are what a resume check
tests.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from trainparity._internal.cases.phase_plan import PhasePlan, current_phase_plan
from trainparity._internal.integrations._common import (
    NeedsUnpickling,
    ScriptCase,
    batch_ids,
    file_fingerprint,
    load_json,
    load_safetensors,
    load_weights_only,
    record_step,
    recording_requested,
    require,
    without_run_dir,
)
from trainparity._internal.recording.track_ids import track_ids

accelerate = require("accelerate", "accelerate")

__all__ = [
    "AccelerateCase",
    "NeedsUnpickling",
    "PhaseRun",
    "observe_accelerate_checkpoint",
]


class PhaseRun:
    """Follows the phase plan in a hand-written Accelerate loop: load at the start, save at the end step."""

    def __init__(self, accelerator: Any) -> None:
        self.accelerator = accelerator
        self.plan: PhasePlan | None = current_phase_plan()
        self.recording = recording_requested()

    @property
    def resuming(self) -> bool:
        return self.plan is not None and self.plan.resume_from is not None

    def resume(self) -> bool:
        """`accelerator.load_state(<staged checkpoint>)` in a resuming phase; True when it loaded."""
        if not self.resuming:
            return False
        self.accelerator.load_state(str(self.plan.resume_from))
        return True

    def track(self, loader: Any, *, id_column: str | int, epoch: int) -> Any:
        """`loader`, recording the `id_column` field of every batch it yields (under a check).

        Wrap what the loop iterates, after `skip_first_batches`: the batches
        it yields are the ones trained on (accelerate's one-batch lookahead
        happens inside it and is not recorded).
        """
        return track_ids(loader, id_of=lambda batch: batch_ids(batch, id_column), epoch=epoch)

    def step_end(self, step: int, state: Callable[[], Mapping[str, object]] | None = None) -> bool:
        """After optimizer step `step`: record it when asked; at the plan's end step save and return True.

        `state` builds the live state to record (called only when a check
        asked for a trajectory). Every rank must call this: `save_state`
        writes each rank's random states.
        """
        if self.recording and state is not None:
            record_step(step, state)
        if self.plan is None or step < self.plan.end_step:
            return False
        self.accelerator.save_state(str(self.plan.checkpoint))
        self.accelerator.wait_for_everyone()
        return True


# `save_state` names: <stem>.<ext> or <stem>_<index>.<ext> for the index-th model, optimizer, ...
_NAME = re.compile(r"^(?P<stem>[a-z_]+?)(?:_(?P<index>\d+))?\.(?P<ext>safetensors|bin|pkl|pt)$")
_TORCH_STEMS = {
    "optimizer": "optimizer",
    "scheduler": "scheduler",
    "sampler": "sampler",
    "dl_state_dict": "dataloader",
    "scaler": "scaler",
    "custom_checkpoint": "custom",
    "random_states": "random_states",
}


def observe_accelerate_checkpoint(path: Path, *, run_dir: Path | None = None) -> dict[str, object]:
    """Every file of an `accelerator.save_state` directory as one observation.

    | key | files | read with |
    | --- | --- | --- |
    | `model` | `model.safetensors` (sharded: its index), `pytorch_model.bin` | safetensors / weights_only |
    | `optimizer`, `scheduler` | `optimizer.bin`, `scheduler.bin` | `torch.load(weights_only=True)` |
    | `random_states` | `random_states_<rank>.pkl`: python, numpy, torch (and device) generators and `step`, per rank | weights_only, numpy arrays allowed |
    | `custom` | `custom_checkpoint_<i>.pkl` (objects given to `register_for_checkpointing`) | weights_only |
    | `sampler`, `dataloader`, `scaler` | `sampler.bin`, `dl_state_dict.bin`, `scaler.pt` | weights_only |
    | `files` | any other file: size and SHA-256 | bytes |
    | `not_observed` | files weights_only refuses, e.g. `sampler.bin` (a pickled SeedableRandomSampler), with the reason | - |

    Several models, optimizers, ... are keyed by their index (`optimizer["1"]`);
    the first has index 0. Strings holding the phase's run directory become `<run_dir>`.
    """
    path = Path(path)
    run_dir = path.parent if run_dir is None else Path(run_dir)
    observation: dict[str, dict[str, object]] = {}
    not_observed: dict[str, str] = {}
    files: dict[str, object] = {}
    handled: set[str] = set()
    for index_file in sorted(path.glob("*.index.json")):
        stem = index_file.name.split(".", 1)[0]
        index = re.fullmatch(r"[a-z_]+?_(\d+)", stem)
        tensors: dict[str, object] = {}
        shards = sorted(set(load_json(index_file)["weight_map"].values()))
        for shard in shards:
            tensors.update(_weights(path / shard))
        observation.setdefault("model", {})[index.group(1) if index else "0"] = tensors
        handled.update({index_file.name, *shards})
    for entry in sorted(path.iterdir()):
        name = entry.name
        if name in handled:
            continue
        match = _NAME.match(name)
        if entry.is_dir() or match is None:
            files[name] = "directory (not observed)" if entry.is_dir() else file_fingerprint(entry)
            continue
        stem, index = match["stem"], match["index"] or "0"
        if stem in ("model", "pytorch_model"):
            observation.setdefault("model", {})[index] = _weights(entry)
        elif stem in _TORCH_STEMS:
            try:
                value = load_weights_only(entry)
            except NeedsUnpickling as refusal:
                not_observed[name] = str(refusal)
                continue
            observation.setdefault(_TORCH_STEMS[stem], {})[index] = value
        else:
            files[name] = file_fingerprint(entry)
    result: dict[str, object] = dict(observation)
    if files:
        result["files"] = files
    if not_observed:
        result["not_observed"] = not_observed
    return without_run_dir(result, run_dir)  # type: ignore[return-value]


def _weights(path: Path) -> dict[str, object]:
    return load_safetensors(path) if path.suffix == ".safetensors" else load_weights_only(path)


class AccelerateCase(ScriptCase):
    """A resume case around an Accelerate script that uses PhaseRun: set `script` and steps.

    For several ranks, launch through torchrun or `accelerate launch` in
    `script`, e.g. `["-m", "torch.distributed.run", "--standalone",
    "--nproc-per-node=2", "train.py"]`.
    """

    def observe_checkpoint(self, path: Path) -> Mapping[str, object]:
        return observe_accelerate_checkpoint(path)
