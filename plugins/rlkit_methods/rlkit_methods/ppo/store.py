"""PPO rollouts: one element per sampled response, collated into a padded batch.

Prompts are left-padded and responses right-padded, so every row splits into prompt and
response at the same column; ``attention_mask`` and ``position_ids`` cover the joined
sequence (positions follow the real tokens, so left padding changes nothing).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from functools import partial
from typing import Iterable, Optional

import torch
from torch.utils.data import DataLoader, Dataset

from rlkit_methods.data.padding import pad, position_ids_from_mask


@dataclass
class PPORLElement:
    """One rollout. ``response_tensor`` holds the sampled ids up to and including EOS (no
    padding); ``logprobs``, ``values`` and ``rewards`` have one entry per response token, and
    so do ``advantages`` (GAE, whitened over the whole rollout phase) and ``returns`` once the
    phase is complete (:func:`rlkit_methods.ppo.losses.phase_advantages_and_returns`).
    ``query_mask`` marks the real prompt tokens when ``query_tensor`` carries padding."""

    query_tensor: torch.Tensor  # (Q,)
    response_tensor: torch.Tensor  # (R,)
    logprobs: torch.Tensor  # (R,)
    values: torch.Tensor  # (R,)
    rewards: torch.Tensor  # (R,)
    query_mask: Optional[torch.Tensor] = None  # (Q,)
    # the frozen trunk's output over the real prompt and response tokens, kept from the rollout
    # so each PPO epoch runs only the trainable top (the trunk's weights never change)
    trunk: Optional[torch.Tensor] = None  # (Q_real + R, H)
    advantages: Optional[torch.Tensor] = None  # (R,)
    returns: Optional[torch.Tensor] = None  # (R,)
    # the generator's log-probs of the response, kept for the truncated importance weight
    sampler_logprobs: Optional[torch.Tensor] = None  # (R,)
    version: int = 0  # the policy version (optimizer steps) that sampled it


@dataclass
class PPORLBatch:
    query_tensors: torch.Tensor  # (B, Q) left-padded
    response_tensors: torch.Tensor  # (B, R) right-padded
    logprobs: torch.Tensor  # (B, R)
    values: torch.Tensor  # (B, R)
    rewards: torch.Tensor  # (B, R)
    response_mask: torch.Tensor  # (B, R) 1 on real response tokens
    attention_mask: torch.Tensor  # (B, Q + R)
    position_ids: torch.Tensor  # (B, Q + R)
    trunk: Optional[torch.Tensor] = None  # (B, Q + R, H), padded like the tokens (zeros)
    advantages: Optional[torch.Tensor] = None  # (B, R)
    returns: Optional[torch.Tensor] = None  # (B, R)
    sampler_logprobs: Optional[torch.Tensor] = None  # (B, R)

    @property
    def rollouts(self) -> "PPORLBatch":
        """The batch itself: a loss written for the trainer's former ``PPOTrainBatch``
        (``batch.rollouts.values``) reads the same fields."""
        return self


def response_mask(responses: torch.Tensor, eos_token_id: int | None) -> torch.Tensor:
    """(B, R) sampled ids -> 1 up to and including the first EOS, 0 after (all 1 without EOS).

    Works on the sampled ids, whatever the pad token is (pad may equal EOS)."""
    if eos_token_id is None:
        return torch.ones_like(responses, dtype=torch.long)
    is_eos = (responses == eos_token_id).long()  # (B, R)
    eos_before = is_eos.cumsum(-1) - is_eos  # EOS tokens strictly before each position
    return (eos_before == 0).long()


def length_mask(lengths: list[int], side: str) -> torch.Tensor:
    """(B, max length) long mask, 1 on each row's first (``right``) or last (``left``) ``lengths[i]`` places."""
    lengths_t = torch.tensor(lengths, dtype=torch.long).unsqueeze(1)  # (B, 1)
    places = torch.arange(max(lengths, default=0)).unsqueeze(0)  # (1, T)
    if side == "left":
        places = places.flip(1)
    return (places < lengths_t).long()


def ppo_collate_fn(padding_side: str, pad_token_id: int, elems: Iterable[PPORLElement]) -> PPORLBatch:
    """Pad rollouts into a :class:`PPORLBatch` (``padding_side`` applies to the prompts)."""
    elems = list(elems)
    queries, q_lengths, r_lengths = [], [], []
    for i, e in enumerate(elems):
        n = e.response_tensor.shape[0]  # .shape, not len(): len() of a tensor costs ~20x more, per element per step
        if not n:
            raise ValueError(f"rollout {i}: empty response; keep at least the EOS token")
        extra = [t.shape[0] for t in (e.advantages, e.returns) if t is not None]
        if not (e.logprobs.shape[0] == e.values.shape[0] == e.rewards.shape[0] == n) or any(k != n for k in extra):
            raise ValueError(
                f"rollout {i}: response has {n} tokens but {len(e.logprobs)} logprobs, "
                f"{len(e.values)} values and {len(e.rewards)} rewards (advantages, returns: {extra}); give one per response token"
            )
        query = e.query_tensor if e.query_mask is None else e.query_tensor[e.query_mask.bool()]
        queries.append(query)
        q_lengths.append(query.shape[0])
        r_lengths.append(n)
    query_tensors = pad(queries, pad_token_id, padding_side)
    query_mask = length_mask(q_lengths, padding_side)  # (B, Q)
    resp_mask = length_mask(r_lengths, "right")  # (B, R)
    attention_mask = torch.cat([query_mask, resp_mask], dim=1)  # (B, Q + R)
    trunk = None
    if any(e.trunk is not None for e in elems):
        if not all(e.trunk is not None and e.trunk.shape[0] == q + r for e, q, r in zip(elems, q_lengths, r_lengths)):
            raise ValueError("rollouts: a trunk must cover each rollout's prompt and response tokens, in every rollout or none")
        trunk = torch.cat([pad([e.trunk[: len(q)] for e, q in zip(elems, queries)], 0.0, padding_side),
                           pad([e.trunk[len(q):] for e, q in zip(elems, queries)], 0.0, "right")], dim=1)
    kept = [e.advantages is not None and e.returns is not None for e in elems]
    if any(kept) and not all(kept):
        raise ValueError("rollouts: advantages and returns must be set on every rollout of a batch or on none")
    sampled = [e.sampler_logprobs is not None for e in elems]
    if any(sampled) and not all(sampled):
        raise ValueError("rollouts: sampler_logprobs must be kept for every rollout of a batch or for none")
    return PPORLBatch(
        query_tensors=query_tensors,
        response_tensors=pad([e.response_tensor for e in elems], pad_token_id, "right"),
        logprobs=pad([e.logprobs for e in elems], 0.0, "right"),
        values=pad([e.values for e in elems], 0.0, "right"),
        rewards=pad([e.rewards for e in elems], 0.0, "right"),
        response_mask=resp_mask,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
        trunk=trunk,
        advantages=pad([e.advantages for e in elems], 0.0, "right") if all(kept) and elems else None,
        returns=pad([e.returns for e in elems], 0.0, "right") if all(kept) and elems else None,
        sampler_logprobs=pad([e.sampler_logprobs for e in elems], 0.0, "right") if all(sampled) and elems else None,
    )


class PPORolloutStorage(Dataset):
    """The rollouts of one phase (trlX's ``PPORolloutStorage``)."""

    def __init__(self, pad_token_id: int, padding_side: str = "left"):
        super().__init__()
        self.pad_token_id = pad_token_id
        self.padding_side = padding_side
        self.history: list[PPORLElement] = []

    def push(self, exps: Iterable[PPORLElement]) -> None:
        self.history += list(exps)

    def clear_history(self) -> None:
        self.history = []

    def export_history(self, location: str) -> str:
        """Write the rollouts as JSON under ``location``; returns the file path."""
        if not os.path.isdir(location):
            raise ValueError(f"rollout_logging_dir: {location!r} is not a directory")
        path = os.path.join(location, f"epoch-{time.time()}.json")

        def to_dict(exp: PPORLElement) -> dict:
            return {k: (v.tolist() if isinstance(v, torch.Tensor) else v) for k, v in exp.__dict__.items()}

        with open(path, "w") as f:
            json.dump([to_dict(e) for e in self.history], f)
        return path

    def __getitem__(self, index: int) -> PPORLElement:
        return self.history[index]

    def __len__(self) -> int:
        return len(self.history)

    def collate(self, elems: Iterable[PPORLElement]) -> PPORLBatch:
        return ppo_collate_fn(self.padding_side, self.pad_token_id, elems)

    def create_loader(self, batch_size: int, shuffle: bool = False, **kwargs) -> DataLoader:
        collate = partial(ppo_collate_fn, self.padding_side, self.pad_token_id)
        return DataLoader(self, batch_size, shuffle=shuffle, collate_fn=collate, **kwargs)
