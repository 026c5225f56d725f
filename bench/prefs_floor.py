"""The floor of the ``reward`` case's step: what one reward-model optimizer step costs with
nothing but the model, on the bench's own pairs (``prefs_common.prefs_spec``, the same seed).

* **bare step**: ``AutoModelForSequenceClassification`` (the SmolLM2 trunk and a one-output
  score head, every weight trained), chosen and rejected rows right-padded into one batch,
  forward, the Bradley-Terry loss with the pair's margin, backward, AdamW: the arithmetic both
  TRL's ``RewardTrainer`` and rlkit's reward model do, without either trainer around it;
* **products**: the linear layers' matrix products alone for the batch's tokens (padded, and
  the real tokens alone as padding-free packing leaves them), three times (forward, and the
  backward's two products per layer), by torch's kernel, which both trainers run
  (bench/sampling_floor.py; in the main venv, without vLLM's prepacked kernel, which needs
  weights that do not change): no attention, norms, activations, optimizer or Python.

A trainer's step divided by the bare step is what is left to remove at the same work.

    OMP_NUM_THREADS=1 .venv/bin/python bench/prefs_floor.py [--pairs 4] [--steps 4] [--model smollm2-135m]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from prefs_common import prefs_spec
from prefs_trl import reward_rows
from sampling_floor import kernels, products_seconds


def pair_batch(pairs: list[dict], tokenizer) -> dict[str, torch.Tensor]:
    """The rows TRL's side trains on (``prefs_trl.reward_rows``: prompt + completion ids, no
    EOS), chosen rows then rejected rows, right-padded, and each pair's margin."""
    from rlkit_methods.data.padding import pad

    rows = reward_rows(pairs, tokenizer, margin=True)
    sequences = [torch.tensor(r) for r in rows["chosen_ids"] + rows["rejected_ids"]]
    return {"input_ids": pad(sequences, tokenizer.pad_token_id), "attention_mask": pad([torch.ones_like(s) for s in sequences], 0),
            "margin": torch.tensor(rows["margin"])}


def bare_step(model, optimizer, batch: dict[str, torch.Tensor]) -> float:
    """CPU seconds of one step: forward, Bradley-Terry loss with margin, backward, AdamW."""
    start = time.process_time()
    rewards = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.squeeze(-1)
    chosen, rejected = rewards.chunk(2)
    loss = -torch.nn.functional.logsigmoid(chosen - rejected - batch["margin"]).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return time.process_time() - start


def main() -> None:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from rlkit_accelerate.assets import resolve

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--pairs", type=int, default=4, help="pairs per step (the bench's --pref-pairs)")
    parser.add_argument("--steps", type=int, default=4, help="steps, the first a warm-up (the bench's --pref-steps)")
    args = parser.parse_args()
    spec = prefs_spec(batch_pairs=args.pairs, steps=args.steps)
    folder = str(resolve(args.model))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(folder, num_labels=1)
    model.config.pad_token_id = tokenizer.pad_token_id
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec["lr"], betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    batches = [pair_batch(spec["pairs"][i * args.pairs:(i + 1) * args.pairs], tokenizer) for i in range(args.steps)]
    steps = [bare_step(model, optimizer, batch) for batch in batches]
    step = statistics.median(steps[1:])
    # the products of the same batches: every linear layer (the score head last, one output)
    weights = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    choices = kernels(weights)
    products = statistics.median(3 * products_seconds(weights, int(b["input_ids"].numel()), choices=choices) for b in batches[1:])
    packed = statistics.median(3 * products_seconds(weights, int(b["attention_mask"].sum()), choices=choices) for b in batches[1:])
    tokens = [int(b["attention_mask"].sum()) for b in batches]
    padded = [int(b["input_ids"].numel()) for b in batches]
    print(f"reward-model step, {args.pairs} pairs ({2 * args.pairs} rows), {statistics.median(tokens)} tokens "
          f"({statistics.median(padded)} with padding), {torch.get_num_threads()} thread(s)")
    print(f"bare step: {step:.3f} CPU s (steps {', '.join(f'{s:.3f}' for s in steps)}; the first a warm-up)")
    print(f"matrix products alone (forward + backward): {products:.3f} CPU s over the padded tokens, "
          f"{packed:.3f} over the real tokens alone (padding-free)")


if __name__ == "__main__":
    main()
