"""A tiny causal LM trained with the Hugging Face Trainer, following trainparity's phase plan.

Padded, variable-length sequences; a 1-layer GPT-2 built from a local config
(no downloads). Runs on one CPU process or, under torchrun, on several
(DDP over gloo). The flags select the configurations the checks compare and
the resume mistakes the tests inject.
"""

import argparse
import os

import torch
from trainparity.distributed import end_rank
from trainparity.integrations import huggingface as tp_hf
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

parser = argparse.ArgumentParser()
parser.add_argument("--max-steps", type=int, default=8)  # the whole LR schedule
parser.add_argument("--batch", type=int, default=4)
parser.add_argument("--accum", type=int, default=1)
parser.add_argument("--dropout", type=float, default=0.1)
parser.add_argument("--ignore-data-skip", action="store_true")
parser.add_argument("--save-only-model", action="store_true")
parser.add_argument("--own-loss", action="store_true")
parser.add_argument("--lose-rank1-rng", action="store_true")
options = parser.parse_args()

VOCAB, PAD = 64, 0


class Sequences(torch.utils.data.Dataset):
    """64 token sequences of 3 to 12 tokens, generated from a fixed seed."""

    def __init__(self):
        generator = torch.Generator().manual_seed(1234)
        lengths = torch.randint(3, 13, (64,), generator=generator)
        self.rows = [torch.randint(1, VOCAB, (int(n),), generator=generator) for n in lengths]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, index):
        # "id": the sample's stable ID, which the callback records (and drops before the model).
        return {"input_ids": self.rows[index], "id": index}


def pad(rows):
    """Right-pad to the longest sequence of the batch; padding is masked out of attention and loss."""
    width = max(len(row["input_ids"]) for row in rows)
    input_ids = torch.full((len(rows), width), PAD)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        input_ids[i, : len(row["input_ids"])] = row["input_ids"]
        attention_mask[i, : len(row["input_ids"])] = 1
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


class OwnLossTrainer(Trainer):
    """A custom token-mean loss per microbatch that ignores `num_items_in_batch`."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        logits = outputs.logits[:, :-1].flatten(0, 1)
        loss = torch.nn.functional.cross_entropy(logits, labels[:, 1:].flatten(), ignore_index=-100)
        return (loss, outputs) if return_outputs else loss


torch.manual_seed(0)
config = GPT2Config(
    vocab_size=VOCAB,
    n_positions=16,
    n_embd=16,
    n_layer=1,
    n_head=2,
    bos_token_id=1,
    eos_token_id=1,
    resid_pdrop=options.dropout,
    embd_pdrop=options.dropout,
    attn_pdrop=options.dropout,
)
model = GPT2LMHeadModel(config)
arguments = TrainingArguments(
    output_dir=tp_hf.output_dir("out"),
    max_steps=options.max_steps,
    per_device_train_batch_size=options.batch,
    gradient_accumulation_steps=options.accum,
    learning_rate=1e-2,
    warmup_steps=2,
    lr_scheduler_type="linear",
    logging_steps=1,
    save_strategy="no",
    seed=0,
    report_to=[],
    use_cpu=True,
    # Under torchrun. On one process accelerate 1.15 fails on any backend named here.
    ddp_backend="gloo" if torch.distributed.is_torchelastic_launched() else None,
    ddp_find_unused_parameters=False,
    disable_tqdm=True,
    dataloader_num_workers=0,
    ignore_data_skip=options.ignore_data_skip,
    save_only_model=options.save_only_model,
)
trainer = (OwnLossTrainer if options.own_loss else Trainer)(
    model=model,
    args=arguments,
    train_dataset=Sequences(),
    data_collator=pad,
    callbacks=[tp_hf.TrainParityCallback(id_column="id")],
)
if options.lose_rank1_rng and tp_hf.resume_from() and arguments.process_index == 1:
    # As if the checkpoint had been copied before rank 1 wrote its RNG file: the Trainer
    # then resumes rank 1 without restoring its RNG, with an info-level log line only.
    os.remove(os.path.join(tp_hf.resume_from(), "rng_state_1.pth"))
trainer.train(resume_from_checkpoint=tp_hf.resume_from())

if torch.distributed.is_initialized():
    # torch's gloo process group can deadlock in its destructor at interpreter exit
    # (docs/distributed.md, "The hang of a correct program"): leave before it runs.
    end_rank()
