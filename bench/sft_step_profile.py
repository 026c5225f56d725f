"""Where rlkit's packed SFT step on ``bench/sft_vs_trl.py``'s work spends beyond the model.

    OMP_NUM_THREADS=1 .venv/bin/python bench/sft_step_profile.py [--steps 2] [--batch 8]
        [--profile rows|bins] [--json PATH]

SmolLM2-135M (fp32, SDPA), the first ``--batch`` IMDB reviews cut at 256 tokens (rlkit's SFT
store, as sft_vs_trl), one batch. Per packing layout (``bins``: the longest row's width with a
block-diagonal mask; ``rows``: end to end under row attention, ``rlkit_accelerate/packing.py``),
interleaved ``--steps`` times, CPU seconds of:

* ``rlkit``: the trainer's ``train_step`` (collate, packed forward, loss, backward, clipping, AdamW);
* ``bare``: the HF model alone on the same packed inputs: forward (the LM head at the counted
  positions), cross-entropy, backward, AdamW;
* ``products``: the linear layers' matrix products alone over the batch's real tokens
  (``bare_step.linear_matmuls``: forward and both backward products, the LM head at every
  token): the floor no implementation of the same arithmetic goes under;

and the share of the packed positions no row uses. ``--profile`` adds a torch-profiler table
(top operators by self CPU time) of one rlkit step in that layout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
LAYOUTS = ("bins", "rows")


def trainer_of(batch: int):
    from sft_vs_trl import sft_trainer

    return sft_trainer("smollm2-135m", batch, 256, batch, 10, 1e-5, max_grad_norm=1.0, seed=0)


def bare_step(lm, opt, batch, cost: float, rows: bool) -> float:
    """CPU seconds of the HF model's forward, cross-entropy, backward and AdamW on the packed batch."""
    import torch.nn.functional as F
    from rlkit_accelerate.packing import pack_rows, running
    from rlkit_methods.engine_kit import IGNORE_INDEX

    start = time.process_time()
    p = pack_rows(batch["attention_mask"], cost, rows=rows)
    next_labels = F.pad(batch["labels"][:, 1:], (0, 1), value=IGNORE_INDEX)
    counted = p.real & (next_labels != IGNORE_INDEX)
    keep = p.keep(counted)
    with running(lm if rows else None, p):
        logits = lm(input_ids=p.pack(batch["input_ids"]), position_ids=p.position_ids, use_cache=False,
                    logits_to_keep=keep).logits
    F.cross_entropy(logits, p.pack(next_labels)[keep]).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return time.process_time() - start


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--profile", choices=LAYOUTS, default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    import torch
    from bare_step import linear_matmuls
    from rlkit_accelerate.packing import pack_rows

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    torch.manual_seed(0)
    trainer = trainer_of(args.batch)
    engine = trainer.engine
    lm, cost, can_rows = engine.unwrapped_model, engine.attention_cost, engine.row_attention
    if not can_rows:
        raise SystemExit("sft_step_profile: the model does not run row attention here; nothing to compare")
    ix = list(range(args.batch))
    batch = trainer.collate([trainer.store[i] for i in ix])
    mask = batch["attention_mask"]
    tokens = int(mask.sum())
    opt = torch.optim.AdamW(lm.parameters(), lr=1e-5)
    products = linear_matmuls(lm)
    products(tokens)  # warm: the operands are made once
    times: dict[str, list[float]] = {f"{side} {layout}": [] for side in ("rlkit", "bare") for layout in LAYOUTS}
    times["products"] = []
    for s in range(args.steps):
        for layout in (LAYOUTS if s % 2 == 0 else LAYOUTS[::-1]):
            engine.row_attention = layout == "rows"
            start = time.process_time()
            trainer.train_step(ix)
            times[f"rlkit {layout}"].append(time.process_time() - start)
            times[f"bare {layout}"].append(bare_step(lm, opt, batch, cost, layout == "rows"))
        start = time.process_time()
        products(tokens)
        times["products"].append(time.process_time() - start)
    unused = {layout: 1 - tokens / pack_rows(mask, cost, rows=layout == "rows").position_ids.numel() for layout in LAYOUTS}
    result = {"tokens": tokens, "rows": args.batch, "unused_share": unused, "cpu_s": times,
              "median_cpu_s": {k: statistics.median(v) for k, v in times.items()}}
    print(f"SmolLM2-135M SFT step: {args.batch} reviews, {tokens} real tokens, {args.steps} steps per layout")
    for layout in LAYOUTS:
        shape = tuple(pack_rows(mask, cost, rows=layout == "rows").position_ids.shape)
        print(f"{layout}: packed {shape}, {unused[layout]:.1%} of the positions unused")
    print(f"{'':<12} {'CPU s':>7} {'tokens/CPU s':>13} {'x products':>11}")
    for name, t in result["median_cpu_s"].items():
        print(f"{name:<12} {t:>7.2f} {tokens / t:>13.0f} {t / result['median_cpu_s']['products']:>11.2f}")
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        engine.row_attention = args.profile == "rows"
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            trainer.train_step(ix)
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
        print(table)
        result["profile"] = table
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    sys.path.insert(0, str(BENCH))
    main()
