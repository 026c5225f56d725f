"""Preference pairs from SmolLM2 itself: two sampled continuations of each IMDB review opening,
the one with the higher VADER score chosen.

    python examples/preferences/pairs.py [--out runs/prefs] [--n 512] [--eval-fraction 0.15]

The prompts are the main job's training prompts (``imdb_prompts`` n=512, words=4, seed=0), the
sampling is its rollouts' (``max_new_tokens`` 16, ``top_k`` 0, ``top_p`` 1, prompts without
special tokens, left-padded), and a continuation's score is its reward (VADER compound of the
continuation alone). A pair whose two continuations score the same (usually both 0: no
sentiment word) is a tie and dropped, as is one with an empty side; the counts are printed and
written to ``pairs.json``. A random ``--eval-fraction`` of the pairs (one pair per prompt, so
the prompts are disjoint) goes to ``pairs_eval.jsonl``, held out from every stage's training,
the rest to ``pairs.jsonl``; both are the ``preference_pairs`` source's rows, with each side's
score kept beside it (``score_chosen``, ``score_rejected``).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Callable, Sequence

GEN_KWARGS = dict(max_new_tokens=16, top_k=0, top_p=1.0, do_sample=True)  # the main job's rollouts


def load_model(path: str):
    """A causal LM and its tokenizer from a folder, or the ``smollm2-135m`` source."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlkit_accelerate.assets import resolve

    folder = str(resolve(path))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    return model, tokenizer


def sample_continuations(model, tokenizer, prompts: Sequence[str], per_prompt: int, seed: int,
                         batch_size: int = 64, gen_kwargs: dict | None = None) -> list[list[str]]:
    """``per_prompt`` sampled continuations of each prompt (the decoded new tokens, special
    tokens dropped), prompts tokenized as rollouts tokenize them: no special tokens, left-padded."""
    import torch

    kwargs = dict(GEN_KWARGS if gen_kwargs is None else gen_kwargs)
    tokenizer.padding_side = "left"
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    flat = [p for p in prompts for _ in range(per_prompt)]
    torch.manual_seed(seed)
    outputs: list[str] = []
    for i in range(0, len(flat), batch_size):
        batch = tokenizer(flat[i : i + batch_size], add_special_tokens=False, padding=True, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**batch, pad_token_id=pad_id, **kwargs)
        outputs += tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    return [outputs[i : i + per_prompt] for i in range(0, len(outputs), per_prompt)]


def preference_pairs(prompts: Sequence[str], continuations: Sequence[Sequence[str]],
                     score: Callable[[list[str]], list[float]]) -> tuple[list[dict], dict[str, int]]:
    """One pair per prompt from its first two continuations, the higher score chosen; ties and
    pairs with a blank side are dropped and counted."""
    pairs, counts = [], {"prompts": len(prompts), "ties": 0, "blank": 0}
    for prompt, (a, b) in zip(prompts, continuations):
        if not a.strip() or not b.strip():
            counts["blank"] += 1
            continue
        sa, sb = score([a, b])
        if sa == sb:
            counts["ties"] += 1
            continue
        (chosen, sc), (rejected, sr) = sorted([(a, sa), (b, sb)], key=lambda x: -x[1])
        pairs.append({"prompt": prompt, "chosen": chosen, "rejected": rejected, "score_chosen": sc, "score_rejected": sr})
    counts["pairs"] = len(pairs)
    return pairs, counts


def split(pairs: list[dict], eval_fraction: float, seed: int) -> tuple[list[dict], list[dict]]:
    """(train, held out): a random ``eval_fraction`` of the pairs held out, both in their original order."""
    if not 0 <= eval_fraction < 1:
        raise ValueError(f"eval_fraction: must be in [0, 1), got {eval_fraction}")
    held = set(random.Random(seed).sample(range(len(pairs)), round(eval_fraction * len(pairs))))
    return [p for i, p in enumerate(pairs) if i not in held], [p for i, p in enumerate(pairs) if i in held]


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m", help="a model folder or source name")
    parser.add_argument("--out", default="runs/prefs", help="folder for pairs.jsonl, pairs_eval.jsonl, pairs.json")
    parser.add_argument("--n", type=int, default=512, help="prompts (the main job's: imdb_prompts n=512 seed=0)")
    parser.add_argument("--eval-fraction", type=float, default=0.15)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from rlkit_methods.data.imdb import imdb_prompts
    from rlkit_methods.rewards.vader import vader_reward

    start = time.time()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model, tokenizer = load_model(args.model)
    prompts = imdb_prompts(n=args.n, words=4, seed=0)
    continuations = sample_continuations(model, tokenizer, prompts, per_prompt=2, seed=args.seed)
    vader = vader_reward()
    pairs, counts = preference_pairs(prompts, continuations, lambda texts: vader(texts, outputs=texts))
    train, held_out = split(pairs, args.eval_fraction, args.seed)
    write_jsonl(out / "pairs.jsonl", train)
    write_jsonl(out / "pairs_eval.jsonl", held_out)
    counts.update(train=len(train), eval=len(held_out), seconds=round(time.time() - start, 1))
    (out / "pairs.json").write_text(json.dumps(counts, indent=1) + "\n")
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
