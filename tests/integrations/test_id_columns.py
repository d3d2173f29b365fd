"""The integrations' callbacks record the IDs of the batches they train on, from a named column."""

from __future__ import annotations

import pytest
import torch
from trainparity._internal.recording.record_ids import (
    IDS_DIR_VARIABLE,
    flush_ids,
    read_recorded_ids,
    recorded_epochs,
)

L = pytest.importorskip("lightning")

from trainparity._internal.integrations._common import RecordingCollator  # noqa: E402
from trainparity.integrations import lightning as tp_pl  # noqa: E402


class Rows(torch.utils.data.Dataset):
    """12 samples that carry their stable ID under "id"."""

    def __len__(self):
        return 12

    def __getitem__(self, index):
        return {"id": index, "x": torch.tensor([float(index)])}


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch["x"]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def fit(tmp_path, callback, epochs=2):
    loader = torch.utils.data.DataLoader(
        Rows(), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(0)
    )
    trainer = L.Trainer(
        max_epochs=epochs,
        callbacks=[callback],
        default_root_dir=tmp_path / "root",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        devices=1,
    )
    trainer.fit(Model(), loader)
    flush_ids()


def test_lightning_callback_records_each_trained_batch_under_its_epoch(tmp_path, monkeypatch):
    monkeypatch.setenv(IDS_DIR_VARIABLE, str(tmp_path / "ids"))
    fit(tmp_path, tp_pl.TrainParityCallback(id_column="id"))
    records = recorded_epochs(tmp_path / "ids")
    assert sorted(records) == [0, 1] and all(list(ranks) == [0] for ranks in records.values())
    epochs = [read_recorded_ids(records[epoch][0]).cast("q").tolist() for epoch in (0, 1)]
    assert [sorted(ids) for ids in epochs] == [list(range(12))] * 2
    assert epochs[0] != epochs[1]  # reshuffled: each epoch's own order was recorded


def test_lightning_callback_without_the_column_says_which_keys_it_has(tmp_path, monkeypatch):
    monkeypatch.setenv(IDS_DIR_VARIABLE, str(tmp_path / "ids"))
    with pytest.raises(ValueError, match=r"no ID column 'sample' \(dict with keys \['id', 'x'\]\)"):
        fit(tmp_path, tp_pl.TrainParityCallback(id_column="sample"), epochs=1)


def test_outside_a_check_nothing_is_recorded(tmp_path, monkeypatch):
    monkeypatch.delenv(IDS_DIR_VARIABLE, raising=False)
    fit(tmp_path, tp_pl.TrainParityCallback(id_column="id"), epochs=1)
    assert not (tmp_path / "ids").exists()


def test_the_recording_collator_holds_the_ids_until_told_which_batches_trained(
    tmp_path, monkeypatch
):
    monkeypatch.setenv(IDS_DIR_VARIABLE, str(tmp_path))
    collate = RecordingCollator(torch.utils.data.default_collate, "id", lambda: 3)
    batch = collate([Rows()[5], Rows()[2]])
    collate([Rows()[7]])  # collated ahead, not trained on yet
    assert sorted(batch) == ["x"] and batch["x"].tolist() == [[5.0], [2.0]]
    collate.record(1)
    flush_ids()
    assert read_recorded_ids(tmp_path / "rank0.epoch3.ids").cast("q").tolist() == [5, 2]
    assert collate.pending == [(3, [7])]


def test_accelerate_phase_run_records_the_batches_its_loop_trains_on(tmp_path, monkeypatch):
    accelerate = pytest.importorskip("accelerate")
    from trainparity.integrations import accelerate as tp_acc

    monkeypatch.setenv(IDS_DIR_VARIABLE, str(tmp_path))
    accelerator = accelerate.Accelerator(cpu=True)
    loader = accelerator.prepare(torch.utils.data.DataLoader(Rows(), batch_size=4))
    run = tp_acc.PhaseRun(accelerator)
    # A resumed loop: one batch already trained on, skipped the way accelerate skips.
    batches = run.track(accelerator.skip_first_batches(loader, 1), id_column="id", epoch=2)
    assert [batch["id"].tolist() for batch in batches] == [[4, 5, 6, 7], [8, 9, 10, 11]]
    flush_ids()
    assert read_recorded_ids(tmp_path / "rank0.epoch2.ids").cast("q").tolist() == list(range(4, 12))
