"""Logged rows as token ids with their advantages, collated for the ``response`` forward."""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch.utils.data import Dataset

from rlkit_methods.data.completions import check_behaviour, prompt_completion_ids, truncate
from rlkit_methods.data.preference_rows import check_logged
from rlkit_methods.logged.losses import advantages_of
from rlkit_methods.preferences.store import response_batch


class LoggedStore(Dataset):
    """One item per logged row: ``prompt`` and ``completion`` ids, ``advantage``, and
    ``behaviour`` (one log-prob per completion token) when they were logged."""

    def __init__(self, items: list[dict[str, Any]], pad_id: int):
        super().__init__()
        self.items, self.pad_id = items, pad_id

    def __getitem__(self, ix: int) -> dict[str, Any]:
        return self.items[ix]

    def __len__(self) -> int:
        return len(self.items)

    def collate(self, items: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        batch = response_batch([it["prompt"] for it in items], [it["completion"] for it in items], self.pad_id)
        batch["advantages"] = torch.tensor([it["advantage"] for it in items], dtype=torch.float)  # (B,)
        if items and "behaviour" in items[0]:
            R = batch["response_tensors"].shape[1]
            batch["behaviour_logprobs"] = torch.tensor([it["behaviour"] + [0.0] * (R - len(it["behaviour"])) for it in items])
        return batch


def _row(sample: Any, i: int) -> dict[str, Any]:
    """A sample as ``train()`` gets it: the source's dict, or ``[prompt, completion]``."""
    if isinstance(sample, (list, tuple)) and len(sample) == 2 and all(isinstance(s, str) for s in sample):
        sample = {"prompt": sample[0], "completion": sample[1]}
    if not isinstance(sample, dict):
        raise ValueError(f"samples[{i}]: a logged row is {{prompt, completion[, behaviour_logprobs]}} or "
                         f"[prompt, completion], got {type(sample).__name__}")
    return sample


def make_logged_store(samples: Sequence[Any], rewards: Sequence[float], tokenizer: Any, max_length: int, *,
                      advantage: str = "grpo", scale_rewards: bool = True) -> tuple[LoggedStore, dict[str, float]]:
    """Rows and rewards -> the store (advantages over the completions of each prompt) and
    statistics of the data (rows, prompts, prompts with a single completion)."""
    if not samples:
        raise ValueError("samples: no logged rows; give at least one {prompt, completion} with a reward")
    items, groups, keys = [], [], {}
    for i, (sample, reward) in enumerate(zip(samples, rewards)):
        where = f"samples[{i}]"
        row = check_logged({**_row(sample, i), "reward": reward}, where)
        sample = row["sample"]
        prompt, completion = prompt_completion_ids(sample["prompt"], sample["completion"], tokenizer, where)
        item: dict[str, Any] = {"reward": row["reward"]}
        if "behaviour_logprobs" in sample:
            check_behaviour(sample["behaviour_logprobs"], completion, where)
            item["behaviour"] = list(sample["behaviour_logprobs"])
        item["prompt"], item["completion"] = truncate(prompt, completion, max_length)
        if "behaviour" in item:
            item["behaviour"] = item["behaviour"][: len(item["completion"])]
        groups.append(keys.setdefault(tuple(prompt), len(keys)))  # completions of one prompt: one group
        items.append(item)
    if 0 < sum("behaviour" in it for it in items) < len(items):
        raise ValueError("samples: some rows have behaviour_logprobs and some do not; give them for all rows or none")
    group_ids = torch.tensor(groups)
    advantages = advantages_of(advantage, torch.tensor([it["reward"] for it in items]), group_ids, scale_rewards)
    for item, a in zip(items, advantages.tolist()):
        item["advantage"] = a
    sizes = torch.bincount(group_ids)
    stats = {"data/rows": float(len(items)), "data/prompts": float(len(keys)), "data/single_prompts": float((sizes == 1).sum())}
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    return LoggedStore(items, pad_id), stats
