"""The preference chain's evaluations, outside any trainer.

    python examples/preferences/evaluate.py vader MODEL [MODEL ...] [--samples 16] [--out FILE]
    python examples/preferences/evaluate.py accuracy RM_FOLDER PAIRS.jsonl [--out FILE]

``vader``: the true reward of each model (a folder, or ``smollm2-135m``): ``--samples``
continuations sampled from each of the main job's 32 eval prompts (``imdb_prompts`` n=32,
words=4, seed=1) as its rollouts sample them (pairs.py's ``GEN_KWARGS``), the same seed for
every model; the mean VADER compound of the continuations, with its standard error.

``accuracy``: a reward model's pairwise accuracy on held-out pairs, scored by the
``reward_model`` reward (the exported folder, as PPO scores rollouts: prompt + completion). A
pair counts 1 when the chosen side scores higher, 0.5 on a tie, 0 otherwise: chance is 0.5.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # pairs.py beside this file

from pairs import load_model, sample_continuations  # noqa: E402


def true_vader(model_path: str, samples: int, seed: int = 0) -> dict[str, float]:
    from rlkit_methods.data.imdb import imdb_prompts
    from rlkit_methods.rewards.vader import vader_reward

    model, tokenizer = load_model(model_path)
    prompts = imdb_prompts(n=32, words=4, seed=1)  # the main job's eval prompts
    outputs = [o for group in sample_continuations(model, tokenizer, prompts, samples, seed) for o in group]
    scores = vader_reward()(outputs, outputs=outputs)
    mean = sum(scores) / len(scores)
    sd = math.sqrt(sum((s - mean) ** 2 for s in scores) / (len(scores) - 1))
    return {"vader": mean, "stderr": sd / math.sqrt(len(scores)), "n": len(scores),
            "examples": [prompts[i] + " | " + outputs[i * samples] for i in range(3)]}


def pairwise_accuracy(rm_path: str, pairs_path: str) -> dict[str, float]:
    from rlkit_methods.rewards.reward_model import reward_model_reward

    pairs = [json.loads(line) for line in Path(pairs_path).read_text().splitlines() if line.strip()]
    score = reward_model_reward(rm_path, batch_size=64)
    chosen = score([p["prompt"] + p["chosen"] for p in pairs])
    rejected = score([p["prompt"] + p["rejected"] for p in pairs])
    hits = [1.0 if c > r else 0.5 if c == r else 0.0 for c, r in zip(chosen, rejected)]
    return {"accuracy": sum(hits) / len(hits), "pairs": len(pairs),
            "margin": sum(c - r for c, r in zip(chosen, rejected)) / len(pairs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    vader = sub.add_parser("vader", help="true VADER of sampled continuations of the main job's eval prompts")
    vader.add_argument("models", nargs="+")
    vader.add_argument("--samples", type=int, default=16, help="continuations per eval prompt")
    vader.add_argument("--out")
    acc = sub.add_parser("accuracy", help="a reward model's pairwise accuracy on held-out pairs")
    acc.add_argument("rm")
    acc.add_argument("pairs")
    acc.add_argument("--out")
    args = parser.parse_args()
    if args.what == "vader":
        result = {m: true_vader(m, args.samples) for m in args.models}
    else:
        result = pairwise_accuracy(args.rm, args.pairs)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
