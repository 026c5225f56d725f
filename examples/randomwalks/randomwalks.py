"""trlX's randomwalks examples through rlkit's Python API.

    python examples/randomwalks/randomwalks.py sft  [--set train.total_steps=100 ...]
    python examples/randomwalks/randomwalks.py ilql
    python examples/randomwalks/randomwalks.py ppo   # starts from the SFT checkpoint
    python examples/randomwalks/randomwalks.py ilql --arch t5   # a tiny T5 (sft, ilql, ppo)

Each loads the YAML beside this file (``{method}_t5_randomwalks.yml`` for ``--arch t5``) and
trains on trlX's sample format: each walk a ``[start letter, rest]`` pair (the start is the
prompt, as in evaluation), evaluated on the 20 start letters. ``ilql --logit-mask`` also passes
the graph as a logit mask, so that Q-guided sampling only takes edges that exist (trlX's
example does not pass it).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

import rlkit_core as rlkit
from rlkit_methods.data.tokenizers import load_tokenizer
from rlkit_methods.rewards.randomwalks import random_walks

HERE = Path(__file__).parent


def token_logit_mask(task, tokenizer) -> torch.Tensor:
    """The node-space mask (True = no edge) in token space: after a node, only its
    successors or EOS may follow."""
    vocab = len(tokenizer)
    mask = torch.ones(vocab, vocab, dtype=torch.bool)
    mask[:, tokenizer.eos_token_id] = False
    ids = {c: tokenizer(c, add_special_tokens=False).input_ids[0] for c in task.char_to_node}
    for a, i in task.char_to_node.items():
        for b, j in task.char_to_node.items():
            mask[ids[a], ids[b]] = not bool(task.adjacency[i, j])
    return mask


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("method", choices=["sft", "ilql", "ppo"])
    parser.add_argument("--set", dest="sets", action="append", default=[], help="config override k=v")
    parser.add_argument("--arch", choices=["gpt2", "t5"], default="gpt2", help="the example's model")
    parser.add_argument("--logit-mask", action="store_true", help="ilql: forbid moves along edges the graph lacks")
    parser.add_argument("--greedy-eval", action="store_true", help="after training, evaluate once more with greedy decoding")
    args = parser.parse_args()
    infix = "_t5" if args.arch == "t5" else ""
    config = rlkit.load_config(HERE / f"{args.method}{infix}_randomwalks.yml", args.sets)
    task = random_walks(seed=1000)
    walks = [[walk[:1], walk[1:]] for walk in task.walks]  # trlX's format: the start is the prompt, as in evaluation
    eval_prompts = task.eval_prompts  # the 20 start letters, as trlX evaluates
    start = time.time()
    if args.method == "sft":
        trainer = rlkit.train(samples=walks, eval_prompts=eval_prompts, metric_fn=task.metric, config=config)
    elif args.method == "ilql":
        rewards = [task.optimality(walk) for walk in task.walks]  # the same order as ``walks``
        mask = token_logit_mask(task, load_tokenizer(config.tokenizer)) if args.logit_mask else None
        trainer = rlkit.train(samples=walks, rewards=rewards, eval_prompts=eval_prompts, metric_fn=task.metric,
                              config=config, logit_mask=mask)
    else:
        reward = lambda samples, **kwargs: task.metric(samples)["optimality"]  # noqa: E731
        trainer = rlkit.train(reward_fn=reward, prompts=task.eval_prompts, eval_prompts=eval_prompts,
                              metric_fn=task.metric, config=config)
    print(f"{args.method}: {trainer.iter_count} steps in {time.time() - start:.1f} s")
    if args.greedy_eval:
        trainer.generate_kwargs.update(do_sample=False)
        stats = trainer.evaluate()
        print("greedy:", {k: round(v, 4) for k, v in stats.items() if k.startswith(("metrics/", "reward/"))})


if __name__ == "__main__":
    main()
