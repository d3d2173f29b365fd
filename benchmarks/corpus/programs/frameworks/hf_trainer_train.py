"""A tiny transformer trained with the Hugging Face Trainer, checkpointing every 2 steps, auto-resuming.

Usage: python hf_trainer_train.py --output-dir DIR --stop-at N [--model gpt2|bert] [--noisy]
[--fault NAME]

The way people write it: `TrainingArguments(save_steps=2)` writes
`checkpoint-<N>` folders into the output directory, and the script resumes
from the newest one there with `trainer.train(resume_from_checkpoint=True)`.
`max_steps` (the whole LR schedule) never changes; a job's slot ends at
`--stop-at`, where a callback has the Trainer save and stop (a preemptible
job). The models are built from local configs (no downloads):

- `gpt2`: a 2-layer GPT-2 (d=16) on padded token sequences of 3 to 12
  tokens; dropout 0.1; AdamW, warm-up then cosine; 2 microbatches a step,
  gradients clipped at 1.0.
- `bert`: a 2-layer BERT (d=32, LayerNorm) classifying sequences into 3
  classes; dropout 0.1; Adafactor, warm-up then linear decay; clipped at 0.5.

`trainparity.record()` runs at the start of training (after the Trainer
loaded its checkpoint) and after every optimizer step.

`--batch`, `--accum` and `--dropout` are the configurations check_runs
compares (4 microbatches of 2 against 1 batch of 8); `--own-loss` is a
Trainer whose `compute_loss` returns each microbatch's token mean and
ignores `num_items_in_batch`: the accumulated gradient is then the sum of
the microbatch means, not the batch's mean (a loss-normalisation bug).

`--noisy` multiplies each loss by a factor of 1 computed as a float32 sum
in an order drawn from os.urandom, as GPU atomics sum in whatever order
threads finish: runs part at the last bit and drift apart (real rounding,
no noise added to any state).

`--fault` is a resume bug applied when the run resumes: `scheduler-file-lost`
(the newest checkpoint's `scheduler.pt` is gone: the Trainer then loads
neither optimizer nor scheduler), `rng-file-lost` (`rng_state.pth` gone:
the Trainer resumes without its RNG, logging at info level),
`ignore-data-skip` (`ignore_data_skip=True` on resume, to start faster: the
epoch's data restarts at its first batch).
"""

import argparse
import os
from pathlib import Path

import numpy
import torch
import trainparity
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)
from transformers.trainer_utils import get_last_checkpoint

parser = argparse.ArgumentParser()
parser.add_argument("--output-dir", type=Path, required=True)
parser.add_argument("--stop-at", type=int, required=True)
parser.add_argument("--max-steps", type=int, default=8)
parser.add_argument("--model", choices=("gpt2", "bert"), default="gpt2")
parser.add_argument("--noisy", action="store_true")
parser.add_argument("--batch", type=int, default=4)
parser.add_argument("--accum", type=int, help="microbatches a step (gpt2: 2, bert: 1)")
parser.add_argument("--dropout", type=float, default=0.1)
parser.add_argument("--own-loss", action="store_true")
parser.add_argument("--fault", choices=("scheduler-file-lost", "rng-file-lost", "ignore-data-skip"))
options = parser.parse_args()

VOCAB, PAD = 64, 0
# The order of the sum is what nondeterministic kernels vary: drawn outside every seeded RNG.
_ORDER = numpy.random.default_rng(int.from_bytes(os.urandom(8), "little"))
_TERMS = (
    torch.rand(1024, generator=torch.Generator().manual_seed(7)) * torch.logspace(-3, 3, 1024)
).numpy()
_TOTAL = numpy.float32(_TERMS.astype(numpy.float64).sum())


def one_summed_in_random_order() -> float:
    """1, up to the rounding of a sequential float32 sum whose order is drawn per call."""
    return float(numpy.add.accumulate(_TERMS[_ORDER.permutation(len(_TERMS))])[-1] / _TOTAL)


class Sequences(torch.utils.data.Dataset):
    """Token sequences of 3 to 12 tokens from a fixed seed; a class label for `bert`."""

    def __init__(self, count: int) -> None:
        generator = torch.Generator().manual_seed(1234)
        lengths = torch.randint(3, 13, (count,), generator=generator)
        self.rows = [torch.randint(1, VOCAB, (int(n),), generator=generator) for n in lengths]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict:
        return {"input_ids": self.rows[index]}


def pad(rows: list[dict]) -> dict:
    """Right-pad to the batch's longest sequence; padding is masked out of attention and loss."""
    width = max(len(row["input_ids"]) for row in rows)
    input_ids = torch.full((len(rows), width), PAD)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        input_ids[i, : len(row["input_ids"])] = row["input_ids"]
        attention_mask[i, : len(row["input_ids"])] = 1
    if options.model == "bert":  # the class: the first token's residue mod 3
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "labels": input_ids[:, 0] % 3,
        }
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


class NoisyTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        if return_outputs:
            return loss[0] * one_summed_in_random_order(), loss[1]
        return loss * one_summed_in_random_order()


class OwnLossTrainer(Trainer):
    """A token-mean loss of its own per microbatch, which ignores `num_items_in_batch`."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        logits = outputs.logits[:, :-1].flatten(0, 1)
        loss = torch.nn.functional.cross_entropy(logits, labels[:, 1:].flatten(), ignore_index=-100)
        return (loss, outputs) if return_outputs else loss


class StopAt(TrainerCallback):
    """The job's slot ends after step `stop_at`: save a checkpoint there and stop."""

    def __init__(self, stop_at: int) -> None:
        self.stop_at = stop_at

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.stop_at:
            control.should_save = True
            control.should_training_stop = True
        return control


class Record(TrainerCallback):
    """trainparity.record() when training starts (after any checkpoint loaded) and per step."""

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        trainparity.record(state.global_step, observed(model, optimizer, kwargs["lr_scheduler"]))

    def on_step_end(self, args, state, control, model=None, optimizer=None, **kwargs):
        trainparity.record(state.global_step, observed(model, optimizer, kwargs["lr_scheduler"]))


def observed(model, optimizer, scheduler) -> dict:
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
    }


def build_model() -> torch.nn.Module:
    torch.manual_seed(0)
    if options.model == "gpt2":
        config = GPT2Config(
            vocab_size=VOCAB,
            n_positions=16,
            n_embd=16,
            n_layer=2,
            n_head=2,
            bos_token_id=1,
            eos_token_id=1,
            resid_pdrop=options.dropout,
            embd_pdrop=options.dropout,
            attn_pdrop=options.dropout,
        )
        return GPT2LMHeadModel(config)
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        num_labels=3,
        hidden_dropout_prob=options.dropout,
        attention_probs_dropout_prob=options.dropout,
        pad_token_id=PAD,
    )
    return BertForSequenceClassification(config)


def main() -> None:
    gpt2 = options.model == "gpt2"
    newest = get_last_checkpoint(options.output_dir) if options.output_dir.is_dir() else None
    ignore_data_skip = False
    if newest is not None and options.fault == "scheduler-file-lost":
        os.remove(os.path.join(newest, "scheduler.pt"))
    if newest is not None and options.fault == "rng-file-lost":
        os.remove(os.path.join(newest, "rng_state.pth"))
    if newest is not None and options.fault == "ignore-data-skip":
        ignore_data_skip = True
    arguments = TrainingArguments(
        output_dir=str(options.output_dir),
        max_steps=options.max_steps,
        per_device_train_batch_size=options.batch,
        gradient_accumulation_steps=options.accum or (2 if gpt2 else 1),
        max_grad_norm=1.0 if gpt2 else 0.5,
        optim="adamw_torch" if gpt2 else "adafactor",
        learning_rate=1e-2,
        weight_decay=0.01,
        warmup_steps=2,
        lr_scheduler_type="cosine" if gpt2 else "linear",
        logging_steps=1,
        save_strategy="steps",
        save_steps=2,
        seed=0,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
        ignore_data_skip=ignore_data_skip,
    )
    trainer_class = NoisyTrainer if options.noisy else Trainer
    trainer = (OwnLossTrainer if options.own_loss else trainer_class)(
        model=build_model(),
        args=arguments,
        train_dataset=Sequences(48 if gpt2 else 24),
        data_collator=pad,
        callbacks=[StopAt(options.stop_at), Record()],
    )
    # Auto-resume: the newest checkpoint-<N> in output_dir, or a fresh start.
    trainer.train(resume_from_checkpoint=True if newest is not None else None)


if __name__ == "__main__":
    main()
