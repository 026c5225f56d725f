"""What both sides of the ``grpo`` and ``rloo`` cases share: the reward and the step's shape.

Stdlib only: the TRL 1.16 worker imports it in the peer's environment, which has no rlkit.
``spec["grpo"]`` is written by ``bench/run.py``:

    prompts          the prompts of the step (from bench/data/imdb_prompts.json)
    num_generations  samples per prompt (a group)
    new_tokens       sampled tokens per completion, exactly (min = max: no early EOS on either side)
    lr, beta, epsilon, epsilon_high, loss_type, scale_rewards, max_grad_norm
"""

from __future__ import annotations

from typing import Any

METHODS = ("grpo", "rloo")


def completions_per_step(g: dict[str, Any]) -> int:
    """Prompts x group size: the rows of the one rollout phase and of the one optimizer step."""
    return len(g["prompts"]) * int(g["num_generations"])


def distinct_words(texts: list[str], new_tokens: int) -> list[float]:
    """The bench's reward: cheap, deterministic, no model, the same on both sides (distinct
    whitespace-separated words per sampled token)."""
    return [len(set(text.split())) / float(new_tokens) for text in texts]


def split_variant(variant: str, choices: dict[str, Any], methods: tuple[str, ...] = METHODS) -> tuple[str, Any]:
    """``"grpo-k2"`` -> ``("grpo", choices["k2"])``; a bad name is one line naming the choices."""
    method, _, setting = variant.partition("-")
    if method not in methods or setting not in choices:
        names = ", ".join(f"{m}-{s}" for m in methods for s in choices)
        raise SystemExit(f"bench: --variant must be one of {names}, got {variant!r}")
    return method, choices[setting]
