"""A tiny model with dropout trained in a hand-written Accelerate loop, following trainparity's phase plan.

Runs on one CPU process or, under torchrun, on several (gloo). The step
counter is registered for checkpointing; a resumed run skips the batches its
epoch already used. `--reseed-after-load` re-seeds every rank after
`load_state`, so the restored per-rank random states are thrown away: the
mistake the tests inject. `--global-rng-loader` leaves the DataLoader without
a generator of its own, so each `iter()` of it draws from the global torch RNG.
"""

import argparse

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from trainparity.distributed import end_rank
from trainparity.integrations import accelerate as tp_acc

parser = argparse.ArgumentParser()
parser.add_argument("--max-steps", type=int, default=8)
parser.add_argument("--reseed-after-load", action="store_true")
parser.add_argument("--global-rng-loader", action="store_true")
options = parser.parse_args()


class Progress:
    """Optimizer steps taken; saved by save_state as custom_checkpoint_0.pkl."""

    def __init__(self):
        self.step = 0

    def state_dict(self):
        return {"step": self.step}

    def load_state_dict(self, state):
        self.step = state["step"]


accelerator = Accelerator(cpu=True)
set_seed(0, device_specific=True)
generator = torch.Generator().manual_seed(0)
inputs = torch.randn(64, 6, generator=generator)
targets = inputs.sum(dim=1, keepdim=True).sin()
# Its own generator: starting an epoch (or skip_first_batches) then draws nothing from the
# global torch RNG, which load_state restores and dropout uses.
loader_generator = None if options.global_rng_loader else torch.Generator().manual_seed(0)
loader = torch.utils.data.DataLoader(
    list(zip(inputs, targets, strict=True)), batch_size=4, generator=loader_generator
)
model = torch.nn.Sequential(
    torch.nn.Linear(6, 16), torch.nn.Dropout(0.2), torch.nn.Tanh(), torch.nn.Linear(16, 1)
)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1 - s / (2 * options.max_steps))
progress = Progress()
accelerator.register_for_checkpointing(progress)
model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)

run = tp_acc.PhaseRun(accelerator)
run.resume()
if run.resuming and options.reseed_after_load:
    set_seed(1, device_specific=True)

done = False
while not done and progress.step < options.max_steps:
    position = progress.step % len(loader)
    batches = accelerator.skip_first_batches(loader, position) if position else loader
    for x, y in batches:
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        progress.step += 1
        done = run.step_end(progress.step) or progress.step >= options.max_steps
        if done:
            break

# torch's gloo process group can deadlock or abort in its destructor at interpreter exit
# (docs/distributed.md, "The hang of a correct program"): leave before it runs.
end_rank()
