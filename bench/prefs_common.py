"""What both sides of the ``reward`` and ``dpo`` cases (and ``prefs_losses_vs_trl.py``) share:
the pairs, the step's shape, the weights that make the losses non-trivial.

Stdlib at import (torch inside functions): the TRL 1.16 worker imports it in the peer's
environment, which has no rlkit. ``spec["prefs"]`` is written by ``bench/run.py``:

    pairs        [{prompt, chosen, rejected, margin}], IMDB reviews (see ``make_pairs``)
    batch_pairs  pairs per optimizer step (one micro-batch: 2 x batch_pairs rows)
    steps        optimizer steps per run (the first is a warm-up; step_s is the median of the rest)
    lr, beta, loss_type, max_length
"""

from __future__ import annotations

import random
import statistics
from typing import Any, Sequence

import grpo_common

METHODS = ("reward", "dpo")
PERTURBED_BLOCKS = 2  # the policy differs from the reference in its top blocks (inside a hydra top of 2)
PERTURB_SCALE = 0.1  # noise std relative to each tensor's std: log-ratio differences of a few nats


def make_pairs(reviews: Sequence[tuple[str, int]], n: int, seed: int = 0, prompt_words: int = 8,
               words: tuple[int, int] = (6, 30)) -> list[dict[str, Any]]:
    """``n`` pairs from IMDB ``(text, label)`` reviews: the prompt is the first ``prompt_words``
    words of a positive review, the chosen completion that review's next words, the rejected
    one a negative review's words after its own first ``prompt_words`` (lengths drawn from
    ``words``, so rows pad differently); ``margin`` in [0, 1) for the margin loss."""
    rng = random.Random(seed)
    longest = prompt_words + words[1]
    positive = [t.split() for t, label in reviews if label == 1 and len(t.split()) >= longest]
    negative = [t.split() for t, label in reviews if label == 0 and len(t.split()) >= longest]
    if len(positive) < n or len(negative) < n:
        raise ValueError(f"n: {n} pairs asked for, the reviews give {min(len(positive), len(negative))}")
    pairs = []
    for good, bad in zip(rng.sample(positive, n), rng.sample(negative, n)):
        chosen, rejected = (rng.randint(*words) for _ in range(2))
        pairs.append({"prompt": " ".join(good[:prompt_words]),
                      "chosen": " " + " ".join(good[prompt_words:prompt_words + chosen]),
                      "rejected": " " + " ".join(bad[prompt_words:prompt_words + rejected]),
                      "margin": round(rng.random(), 4)})
    return pairs


def split_variant(variant: str, choices: dict[str, Any]) -> tuple[str, Any]:
    """``"dpo-k2"`` -> ``("dpo", choices["k2"])``; a bad name is one line naming the choices."""
    return grpo_common.split_variant(variant, choices, methods=METHODS)


def step_median(seconds: Sequence[float]) -> float:
    """The step time of a run: the median over its steps after the first (which pays for lazy
    initialisation on both sides); a run of one step has only that one."""
    if not seconds:
        raise ValueError("no optimizer step was timed")
    return statistics.median(seconds[1:] if len(seconds) > 1 else seconds)


def perturb_top(decoder_layers, seed: int = 0, blocks: int = PERTURBED_BLOCKS, scale: float = PERTURB_SCALE) -> None:
    """Gaussian noise on the top ``blocks`` decoder layers, in place, the same on both sides
    (same layer order, parameter order and generator): the policy of the DPO loss check, while
    the reference keeps the loaded weights."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in list(decoder_layers)[-blocks:]:
            for _, param in sorted(layer.named_parameters(), key=lambda kv: kv[0]):
                noise = torch.randn(param.shape, generator=gen, dtype=torch.float32)
                param.add_((scale * param.float().std().clamp(min=1e-3) * noise).to(param.dtype))


def score_weight(hidden_size: int, seed: int = 0):
    """The (1, H) reward head both sides start the loss check from (rlkit's starts at zero,
    TRL's is random: zero would make every reward 0 and every loss log 2)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    return torch.randn(1, hidden_size, generator=gen) / hidden_size ** 0.5


# the loss check's settings: (name, method, fields); rlkit's field names, which are TRL's
LOSS_SETTINGS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("reward Bradley-Terry", "reward", {"margin": False}),
    ("reward Bradley-Terry, margin", "reward", {"margin": True}),
    ("reward Bradley-Terry, margin, center_rewards_coefficient=0.01", "reward",
     {"margin": True, "center_rewards_coefficient": 0.01}),
    ("dpo sigmoid beta=0.1", "dpo", {"loss_type": "sigmoid", "beta": 0.1, "label_smoothing": 0.0}),
    ("dpo sigmoid beta=0.5", "dpo", {"loss_type": "sigmoid", "beta": 0.5, "label_smoothing": 0.0}),
    ("dpo sigmoid beta=0.1 label_smoothing=0.1", "dpo", {"loss_type": "sigmoid", "beta": 0.1, "label_smoothing": 0.1}),
    ("dpo ipo beta=0.1", "dpo", {"loss_type": "ipo", "beta": 0.1, "label_smoothing": 0.0}),
    ("dpo hinge beta=0.1", "dpo", {"loss_type": "hinge", "beta": 0.1, "label_smoothing": 0.0}),
)


def cdpo_loss(deltas: Sequence[float], beta: float, label_smoothing: float) -> float:
    """Conservative DPO (TRL 0.x's sigmoid with label smoothing) from the log-ratio
    differences h of a batch: mean of -(1 - e) log sigma(beta h) - e log sigma(-beta h).
    TRL 1.16's sigmoid ignores ``label_smoothing`` (its robust and exo_pair losses read it), so
    the smoothed setting is compared on TRL's own h with this formula."""
    import math

    def log_sigmoid(x: float) -> float:
        return -math.log1p(math.exp(-x)) if x >= 0 else x - math.log1p(math.exp(x))

    e = label_smoothing
    return sum(-(1 - e) * log_sigmoid(beta * h) - e * log_sigmoid(-beta * h) for h in deltas) / len(deltas)


def prefs_spec(batch_pairs: int = 4, steps: int = 4, check_pairs: int = 4, beta: float = 0.1, loss_type: str = "sigmoid",
               lr: float = 1e-6, max_length: int = 1024, seed: int = 0) -> dict[str, Any]:
    """``spec["prefs"]`` (run in rlkit's venv: the pairs come from its offline IMDB reviews)."""
    from rlkit_methods.data.imdb import read_reviews

    pairs = make_pairs(read_reviews("imdb"), max(batch_pairs * steps, check_pairs), seed)
    return {"pairs": pairs, "check_pairs": pairs[:check_pairs], "batch_pairs": batch_pairs, "steps": steps,
            "lr": lr, "beta": beta, "loss_type": loss_type, "max_length": max_length}
