"""VADER of Q-guided continuations per beta, from a saved ILQL checkpoint of
``examples/sentiments/ilql_smollm2.yml``, with more samples than the loop's evaluation and
the same random numbers for every beta.

    python bench/ilql_imdb_eval.py CHECKPOINT/hf_model [--betas 0,1,4,16] [--repeats 8] [--min-new-tokens 16]
        [--behaviour-top-k 20]

The loop's evaluation draws each beta's 32 continuations from one random stream, one beta
after the other, so two betas differ by sampling noise as well as by the guidance: with Q
flat over the vocabulary (untrained embedding heads: every beta is the behaviour policy) the
four betas' means spread over 0.11-0.28. Here each beta starts from the same seed
(common random numbers: equal policies give equal samples) and each of the example's 32 eval
prompts (``imdb_prompts(n=32, words=4, seed=1)``) is answered ``--repeats`` times. Prompts are
tokenized and left-padded as the prompt pipeline does (no special tokens), continuations
decoded without special tokens, as the loop's evaluation does.
"""

from __future__ import annotations

import argparse
import json
import statistics

from stats import mean_se  # beside this file


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", help="a checkpoint's hf_model folder")
    p.add_argument("--betas", default="0,1,4,16")
    p.add_argument("--repeats", type=int, default=8)
    p.add_argument("--q-heads", default="embedding")
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--min-new-tokens", type=int, default=0)
    p.add_argument("--top-k", type=int, default=20)
    p.add_argument("--behaviour-top-k", type=int, default=0,
                   help="gen_kwargs.behaviour_top_k: k > 0 samples only among the behaviour policy's top k (0: trlX's rule)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    import torch
    from transformers import AutoTokenizer

    from rlkit_accelerate.models.ilql_heads import CausalLMWithILQLHeads
    from rlkit_methods.data.imdb import imdb_prompts
    from rlkit_methods.rewards.vader import vader_reward

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = CausalLMWithILQLHeads.from_pretrained(args.model, q_heads=args.q_heads).eval()
    prompts = imdb_prompts(n=32, words=4, seed=1) * args.repeats
    ids = [tokenizer(t, add_special_tokens=False).input_ids for t in prompts]
    width = max(map(len, ids))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    input_ids = torch.tensor([[pad] * (width - len(x)) + x for x in ids])
    attention_mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids])
    score = vader_reward()
    rows = {}
    for beta in [float(b) for b in args.betas.split(",")]:
        torch.manual_seed(args.seed)  # the same random numbers for every beta
        out = model.generate(input_ids, attention_mask, beta=beta, top_k=args.top_k, temperature=1.0,
                             max_new_tokens=args.max_new_tokens, min_new_tokens=args.min_new_tokens,
                             behaviour_top_k=args.behaviour_top_k)
        texts = tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)
        vader = score(texts, prompts, texts)
        mean, se = mean_se(vader)
        rows[beta] = {"mean": mean, "se": se, "scores": vader,
                      "n": len(vader), "words": statistics.fmean(len(t.split()) for t in texts), "examples": [[prompts[i], texts[i]] for i in range(3)]}
        print(json.dumps({"beta": beta, **{k: v for k, v in rows[beta].items() if k not in ("examples", "scores")}}), flush=True)
    base = rows[min(rows)]
    best = max(rows, key=lambda b: rows[b]["mean"])
    # the same prompts and random numbers for both: the SE of the per-sample differences
    diffs = [a - b for a, b in zip(rows[best]["scores"], base["scores"])]
    print(json.dumps({"best_beta": best, "best_minus_beta0": rows[best]["mean"] - base["mean"],
                      "paired_se": mean_se(diffs)[1],
                      "examples": {b: r["examples"] for b, r in rows.items()}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
