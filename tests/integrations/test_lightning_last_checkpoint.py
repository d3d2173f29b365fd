"""observe_lightning_checkpoint on a ModelCheckpoint directory, as `ckpt_path="last"` reads it."""

from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("lightning")
from trainparity.integrations.lightning import observe_lightning_checkpoint  # noqa: E402

CALLBACK = "ModelCheckpoint{'monitor': None, 'mode': 'min', 'every_n_train_steps': 2}"


def _save(path, step: int, last_name: str, mtime: float) -> None:
    state = {"last_model_path": str(path.parent / last_name), "dirpath": str(path.parent)}
    torch.save({"global_step": step, "callbacks": {CALLBACK: state}}, path)
    os.utime(path, (mtime, mtime))


def test_a_directory_reads_the_newest_last_checkpoint_without_its_version(tmp_path):
    """Resumed from a staged copy, ModelCheckpoint wrote last-v1.ckpt beside the old last.ckpt."""
    _save(tmp_path / "last.ckpt", 4, "last.ckpt", 1_000_000)
    _save(tmp_path / "last-v1.ckpt", 8, "last-v1.ckpt", 2_000_000)
    observed = observe_lightning_checkpoint(tmp_path, run_dir=tmp_path)
    assert observed["global_step"] == 8
    assert observed["callbacks"][CALLBACK]["last_model_path"] == "<run_dir>/last.ckpt"
    assert observed["callbacks"][CALLBACK]["dirpath"] == "<run_dir>"
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="save_last=True"):
        observe_lightning_checkpoint(tmp_path / "empty")
