"""A tiny regression model trained with Lightning, following trainparity's phase plan.

32 samples in batches of 4 (8 steps an epoch), AdamW with a step-wise
OneCycle schedule over `--max-steps`, and a stateful callback that counts the
samples seen. The DataLoader can say how far into its epoch it is
(`state_dict`), so Lightning resumes it mid-epoch; `--plain-loader` uses a
plain DataLoader instead. `--forget-callback-state` gives the callback a
load_state_dict that restores nothing, the mistake the tests inject.
`--devices 2` under torchrun trains with DDP over gloo: Lightning joins the
process group torchrun set up and gives each rank half of every epoch.
"""

import argparse

import lightning as L
import torch
from trainparity.distributed import end_rank
from trainparity.integrations import lightning as tp_pl

parser = argparse.ArgumentParser()
parser.add_argument("--max-steps", type=int, default=12)
parser.add_argument("--forget-callback-state", action="store_true")
parser.add_argument("--plain-loader", action="store_true")
parser.add_argument("--devices", type=int, default=1)
options = parser.parse_args()


class Regression(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)
        )

    def training_step(self, batch, batch_idx):
        inputs, targets = batch
        return torch.nn.functional.mse_loss(self.net(inputs), targets)

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=1e-2)
        schedule = torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=5e-2, total_steps=options.max_steps
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class ResumableLoader(torch.utils.data.DataLoader):
    """Knows how many batches of its epoch it has yielded; after load_state_dict it skips them."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.position = 0
        self.resume_position = 0

    def __iter__(self):
        skip, self.resume_position = self.resume_position, 0
        self.position = skip
        for index, batch in enumerate(super().__iter__()):
            if index >= skip:
                self.position = index + 1
                yield batch

    def state_dict(self):
        return {"position": self.position}

    def load_state_dict(self, state):
        self.resume_position = state["position"]


class SamplesSeen(L.Callback):
    """Counts training samples; its count is part of the checkpoint (`callbacks["SamplesSeen"]`)."""

    def __init__(self):
        self.count = 0

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.count += len(batch[0])

    def state_dict(self):
        return {"count": self.count}

    def load_state_dict(self, state):
        if not options.forget_callback_state:
            self.count = state["count"]


L.seed_everything(0, verbose=False)
generator = torch.Generator().manual_seed(0)
inputs = torch.randn(32, 6, generator=generator)
targets = inputs.sum(dim=1, keepdim=True).sin()
loader_class = torch.utils.data.DataLoader if options.plain_loader else ResumableLoader
loader = loader_class(list(zip(inputs, targets, strict=True)), batch_size=4)
trainer = L.Trainer(
    max_steps=options.max_steps,
    default_root_dir=tp_pl.root_dir("runs"),
    callbacks=[SamplesSeen(), tp_pl.TrainParityCallback()],
    accelerator="cpu",
    devices=options.devices,
    strategy="ddp" if options.devices > 1 else "auto",
    logger=False,
    enable_progress_bar=False,
    enable_model_summary=False,
)
trainer.fit(Regression(), loader, ckpt_path=tp_pl.ckpt_path())

if torch.distributed.is_initialized():
    # torch's gloo process group can deadlock in its destructor at interpreter exit
    # (docs/distributed.md, "The hang of a correct program"): leave before it runs.
    end_rank()
