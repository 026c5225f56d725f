"""Preference pairs from SmolLM2 itself: several sampled continuations of each IMDB review
opening, the one with the highest VADER score chosen and the one with the lowest rejected.

    python examples/preferences/pairs.py [--out runs/prefs] [--n 1024] [--per-prompt 4] [--min-gap 0.5]
    python examples/preferences/pairs.py --reuse --min-gap 0.3   # new pairs from the same samples

The prompts are ``imdb_prompts`` n=1024, words=4, seed=0 (the main job's 512 training prompts
and the next 512 of the same draw), the sampling is its rollouts' (``max_new_tokens`` 16,
``top_k`` 0, ``top_p`` 1, prompts without special tokens, left-padded; the model in bfloat16
unless ``--dtype float32``: 1.7x less CPU), and a continuation's score is its reward (VADER
compound of the continuation alone). Each prompt gives one pair, its best against its worst
continuation; it is dropped when fewer than two continuations are non-blank, when best and
worst score the same (a tie: usually all 0, no sentiment word), or when their gap is under
``--min-gap`` (a label that turns on one mild word is noise to a reward model); the counts
are printed and written to ``pairs.json``. Every continuation is kept in ``samples.jsonl``, so
``--reuse`` remakes the pairs with other options without sampling again. A random
``--eval-fraction`` of the pairs (one pair per prompt, so the prompts are disjoint) goes to
``pairs_eval.jsonl``, held out from every stage's training, the rest to ``pairs.jsonl``; both
are the ``preference_pairs`` source's rows, with each side's score kept beside it
(``score_chosen``, ``score_rejected``).
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
                     score: Callable[[list[str]], list[float]], min_gap: float = 0.0) -> tuple[list[dict], dict[str, int]]:
    """One pair per prompt: its highest-scoring continuation chosen, its lowest rejected. A
    prompt with fewer than two non-blank continuations counts as ``blank``, one whose best and
    worst score the same as a tie, one whose gap is under ``min_gap`` as ``narrow``; all three
    are dropped."""
    pairs, counts = [], {"prompts": len(prompts), "blank": 0, "ties": 0, "narrow": 0}
    for prompt, group in zip(prompts, continuations):
        texts = [t for t in group if t.strip()]
        if len(texts) < 2:
            counts["blank"] += 1
            continue
        ranked = sorted(zip(texts, score(texts)), key=lambda x: -x[1])  # stable: the first of equals
        (chosen, sc), (rejected, sr) = ranked[0], ranked[-1]
        if sc == sr:
            counts["ties"] += 1
        elif sc - sr < min_gap:
            counts["narrow"] += 1
        else:
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
    parser.add_argument("--out", default="runs/prefs", help="folder for pairs.jsonl, pairs_eval.jsonl, pairs.json, samples.jsonl")
    parser.add_argument("--n", type=int, default=1024, help="prompts: imdb_prompts n, seed 0 (the main job's 512 are the first 512)")
    parser.add_argument("--per-prompt", type=int, default=4, help="continuations sampled per prompt; the best and the worst make its pair")
    parser.add_argument("--min-gap", type=float, default=0.5, help="drop pairs whose VADER gap (chosen - rejected) is smaller")
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16", help="the model's dtype while sampling")
    parser.add_argument("--reuse", action="store_true", help="make the pairs from an earlier run's samples.jsonl instead of sampling")
    parser.add_argument("--eval-fraction", type=float, default=0.15)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.per_prompt < 2:
        parser.error(f"--per-prompt: a pair needs at least 2 continuations, got {args.per_prompt}")

    from rlkit_methods.data.imdb import imdb_prompts
    from rlkit_methods.rewards.vader import vader_reward

    start = time.time()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    samples_path = out / "samples.jsonl"
    if args.reuse:
        if not samples_path.is_file():
            parser.error(f"--reuse: {samples_path} does not exist; run pairs.py once without --reuse")
        rows = [json.loads(line) for line in samples_path.read_text().splitlines() if line.strip()]
        prompts, continuations = [r["prompt"] for r in rows], [r["continuations"] for r in rows]
    else:
        import torch

        model, tokenizer = load_model(args.model)
        model.to(getattr(torch, args.dtype))
        prompts = imdb_prompts(n=args.n, words=4, seed=0)
        continuations = sample_continuations(model, tokenizer, prompts, per_prompt=args.per_prompt, seed=args.seed,
                                             batch_size=128)
        write_jsonl(samples_path, [{"prompt": p, "continuations": c} for p, c in zip(prompts, continuations)])
    vader = vader_reward()
    pairs, counts = preference_pairs(prompts, continuations, lambda texts: vader(texts, outputs=texts), args.min_gap)
    train, held_out = split(pairs, args.eval_fraction, args.seed)
    write_jsonl(out / "pairs.jsonl", train)
    write_jsonl(out / "pairs_eval.jsonl", held_out)
    counts.update(train=len(train), eval=len(held_out), min_gap=args.min_gap, seconds=round(time.time() - start, 1))
    (out / "pairs.json").write_text(json.dumps(counts, indent=1) + "\n")
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
