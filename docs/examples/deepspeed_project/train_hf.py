"""A tiny causal LM trained by the Hugging Face Trainer under DeepSpeed ZeRO, on gloo CPU ranks.

    DS_ACCELERATOR=cpu torchrun --standalone --nproc-per-node=2 train_hf.py [--fault NAME]

`TrainingArguments(deepspeed=<a config dict>)`: ZeRO-2, the config's AdamW
(torch's: `torch_adam` in its params) and WarmupDecayLR, their "auto" values filled by
the Trainer. A 1-layer GPT-2 from a local config (no downloads). The
Trainer saves and resumes the engine's checkpoint (`latest`,
`global_step<N>/`) inside its own `checkpoint-<N>`; TrainParityCallback
follows the check's plan and records the engine's state
(`trainparity.integrations.deepspeed.engine_state`) after loading and after
every step.

`--fault no-optimizer-states`: the resume loads the engine's weights and
scheduler but not its optimizer states (`load_checkpoint(...,
load_optimizer_states=False)`, here forced on the engine the Trainer
resumes): AdamW's moments and step count start again.
"""

import argparse
import functools

import deepspeed
import torch
from trainparity.distributed import end_rank
from trainparity.integrations import deepspeed as tp_ds
from trainparity.integrations import huggingface as tp_hf
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

parser = argparse.ArgumentParser()
parser.add_argument("--max-steps", type=int, default=4)  # the whole LR schedule
parser.add_argument("--dropout", type=float, default=0.0)
parser.add_argument("--fault", choices=("no-optimizer-states",))
options = parser.parse_args()

VOCAB = 64


class Sequences(torch.utils.data.Dataset):
    """64 token sequences of 8 tokens, generated from a fixed seed."""

    def __init__(self):
        self.rows = torch.randint(1, VOCAB, (64, 8), generator=torch.Generator().manual_seed(1))

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, index):
        return {"input_ids": self.rows[index], "labels": self.rows[index]}


DEEPSPEED = {
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "zero_optimization": {"stage": 2},
    "optimizer": {
        "type": "AdamW",
        "params": {
            "lr": "auto",
            "betas": "auto",
            "eps": "auto",
            "weight_decay": "auto",
            # torch's AdamW. Without it, on the CPU accelerator, DeepSpeed's FusedAdam keeps
            # beta**step in its C++ optimizer object, not in the checkpoint: a resumed run
            # recomputes it with pow() where the uninterrupted one multiplied step by step,
            # and the first step after the resume moves the weights by a rounding's worth
            # (docs/distributed.md, "DeepSpeed ZeRO").
            "torch_adam": True,
        },
    },
    "scheduler": {
        "type": "WarmupDecayLR",
        "params": {
            "warmup_min_lr": 0,
            "warmup_max_lr": "auto",
            "warmup_num_steps": "auto",
            "total_num_steps": "auto",
        },
    },
}

if options.fault == "no-optimizer-states":
    # The bug: the engine resumes without its optimizer states (what
    # load_checkpoint(load_optimizer_states=False) does), with no error or warning. The Trainer
    # passes load_optimizer_states=True itself: the engine's method is replaced to drop it.
    load_checkpoint = deepspeed.DeepSpeedEngine.load_checkpoint

    @functools.wraps(load_checkpoint)
    def load_without_optimizer_states(engine, *args, **kwargs):
        return load_checkpoint(engine, *args, **{**kwargs, "load_optimizer_states": False})

    deepspeed.DeepSpeedEngine.load_checkpoint = load_without_optimizer_states

torch.manual_seed(0)
config = GPT2Config(
    vocab_size=VOCAB,
    n_positions=16,
    n_embd=16,
    n_layer=1,
    n_head=2,
    bos_token_id=1,
    eos_token_id=1,
    # No dropout by default: what is compared is the engine's state, not the RNG.
    resid_pdrop=options.dropout,
    embd_pdrop=options.dropout,
    attn_pdrop=options.dropout,
)
arguments = TrainingArguments(
    output_dir=tp_hf.output_dir("out"),
    max_steps=options.max_steps,
    per_device_train_batch_size=2,
    learning_rate=1e-2,
    weight_decay=0.01,
    warmup_steps=2,
    logging_steps=1,
    save_strategy="no",
    seed=0,
    report_to=[],
    use_cpu=True,
    ddp_backend="gloo",
    deepspeed=DEEPSPEED,
    disable_tqdm=True,
    dataloader_num_workers=0,
)
trainer = Trainer(
    model=GPT2LMHeadModel(config),
    args=arguments,
    train_dataset=Sequences(),
    # trainer.model_wrapped is the DeepSpeed engine once training starts.
    callbacks=[tp_hf.TrainParityCallback(state=lambda: tp_ds.engine_state(trainer.model_wrapped))],
)
trainer.train(resume_from_checkpoint=tp_hf.resume_from())
# torch's gloo process group can deadlock in its destructor at interpreter exit: leave first.
end_rank()
