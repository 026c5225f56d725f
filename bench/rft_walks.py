"""RFT on randomwalks: rlkit's examples/randomwalks/rft_randomwalks.yml next to trlX's own
examples/randomwalks/rft_randomwalks.py, at the same settings, from the same SFT model.

    python bench/rft_walks.py --sft-model DIR [--steps 60] [--trlx-src TRLX_CHECKOUT] [--out DIR]

trlX's script runs unchanged through its ``main(hparams)``: the hparams point it at the SFT
model folder, a folder holding rlkit's 23-token randomwalks tokenizer, a temporary
checkpoint folder and ``--steps``; ``trlx.train`` is wrapped only to keep the trainer it
returns. Both sides then sample the 20 start letters 50 times each (1000 walks) and report
the mean optimality (trlX's metric on trlX's side, rlkit's on rlkit's; they agree on valid
finished walks). One run per side, one process, OMP_NUM_THREADS=1; this machine is shared.
Needs bench/.venv-trlx (see trlx_peer.py) and a trlX checkout.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
REPEATS = 50


def rlkit_side(args) -> dict:
    import rlkit_core as rlkit
    from rlkit_methods.rewards.randomwalks import random_walks

    sets = [f"model.model_path={args.sft_model}", f"train.total_steps={args.steps}",
            f"train.checkpoint_dir={args.work}/rlkit", f"train.eval_interval={args.steps}"]
    config = rlkit.load_config(ROOT / "examples" / "randomwalks" / "rft_randomwalks.yml", sets)
    start = time.perf_counter()
    trainer = rlkit.train_from_config(config)
    seconds = time.perf_counter() - start
    task = random_walks(seed=config.train.seed)
    return {"side": "rlkit", "steps": trainer.iter_count, "seconds": seconds,
            "optimality": mean_optimality(trainer, task.eval_prompts * REPEATS, task.metric)}


def mean_optimality(trainer, prompts, metric) -> float:
    """Mean optimality of one sample per prompt, batches of 100 (both trainers' generate)."""
    import torch

    tokenizer, values = trainer.tokenizer, []
    torch.manual_seed(0)
    for i in range(0, len(prompts), 100):
        batch = tokenizer(prompts[i : i + 100], return_tensors="pt", padding=True, add_special_tokens=False)
        out = trainer.generate(batch["input_ids"].to(trainer.accelerator.device if hasattr(trainer, "accelerator") else "cpu"),
                               batch["attention_mask"])
        texts = tokenizer.batch_decode(out, skip_special_tokens=True)
        values += metric(texts)["optimality"]
    return sum(values) / len(values)


def trlx_side(args) -> dict:
    sys.path[:0] = [str(BENCH / "standins"), args.trlx_src]
    import trlx
    from examples.randomwalks import generate_random_walks
    from transformers import PreTrainedTokenizerFast
    from tokenizers import Tokenizer, decoders, models

    vocab = json.loads(args.vocab)
    model = Tokenizer(models.BPE({token: i for i, token in enumerate(vocab)}, [], dropout=None))
    model.decoder = decoders.Fuse()
    folder = f"{args.work}/trlx-tokenizer"
    PreTrainedTokenizerFast(tokenizer_object=model, bos_token=vocab[-2], eos_token=vocab[-2], pad_token=vocab[-1]).save_pretrained(folder)

    import importlib.util

    spec = importlib.util.spec_from_file_location("rft_randomwalks", Path(args.trlx_src) / "examples" / "randomwalks" / "rft_randomwalks.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    kept = {}
    train = trlx.train

    def keep(*a, **k):
        kept["trainer"] = train(*a, **k)
        return kept["trainer"]

    script.trlx.train = keep
    hparams = {"model.model_path": args.sft_model, "tokenizer.tokenizer_path": folder, "train.total_steps": args.steps,
               "train.eval_interval": args.steps, "train.checkpoint_dir": f"{args.work}/trlx", "train.tracker": None}
    start = time.perf_counter()
    script.main(hparams)
    seconds = time.perf_counter() - start
    trainer = kept["trainer"]
    metric, prompts, _, _ = generate_random_walks(seed=trainer.config.train.seed)
    return {"side": "trlx", "steps": trainer.iter_count, "seconds": seconds,
            "optimality": mean_optimality(trainer, prompts * REPEATS, metric)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sft-model", required=True, help="the SFT model folder (sft_randomwalks.yml's hf_model)")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--trlx-src", default=None, help="a trlX checkout (default: $RLKIT_TRLX_SRC)")
    parser.add_argument("--out", default=None, help="folder for results (default: a temporary folder)")
    parser.add_argument("--side", choices=["rlkit", "trlx"], help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--vocab", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        result = rlkit_side(args) if args.side == "rlkit" else trlx_side(args)
        Path(args.work, f"{args.side}.json").write_text(json.dumps(result))
        return
    work = args.out or tempfile.mkdtemp(prefix="rft-walks-")
    trlx_python = BENCH / ".venv-trlx" / "bin" / "python"
    if not trlx_python.exists():
        raise SystemExit(f"{trlx_python}: no trlX venv; make it with bench/run.py's randomwalks cases (trlx_peer.py)")
    from rlkit_methods.data.tokenizers import randomwalks_vocab
    from trlx_peer import PeerError, trlx_source

    try:
        args.trlx_src = str(trlx_source(args.trlx_src))
    except PeerError as exc:
        raise SystemExit(f"error: {exc}") from None

    env = dict(os.environ, OMP_NUM_THREADS="1")
    common = ["--sft-model", str(Path(args.sft_model).resolve()), "--steps", str(args.steps), "--work", work,
              "--trlx-src", args.trlx_src, "--vocab", json.dumps(randomwalks_vocab())]
    for side, python in (("rlkit", sys.executable), ("trlx", str(trlx_python))):
        subprocess.run([python, __file__, "--side", side, *common], check=True, env=env)
    rows = [json.loads(Path(work, f"{side}.json").read_text()) for side in ("rlkit", "trlx")]
    print(f"RFT randomwalks, {args.steps} steps from {args.sft_model}; 1000 samples after training (OMP_NUM_THREADS=1, shared machine)")
    print(f"{'side':8}{'steps':>7}{'optimality':>12}{'train s':>10}")
    for row in rows:
        print(f"{row['side']:8}{row['steps']:>7}{row['optimality']:>12.3f}{row['seconds']:>10.1f}")


if __name__ == "__main__":
    main()
