"""GRPO/RLOO rollouts: one element per sampled response with its (group-relative) advantage.

Collated like PPO's rollouts (prompts left-padded, responses right-padded, positions following
the real tokens, the frozen trunk padded like the tokens): the engine's ``response`` forward
reads the same fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

import torch

from rlkit_methods.data.padding import pad
from rlkit_methods.ppo.store import PPORLElement, PPORolloutStorage, ppo_collate_fn


@dataclass
class GroupElement:
    """One sample of a prompt's group. ``old_logprobs`` is kept when the loss needs pi_old (more
    than one optimizer step per rollout phase); ``ref_logprobs`` when GRPO's KL term is on."""

    query_tensor: torch.Tensor  # (Q,)
    response_tensor: torch.Tensor  # (R,) up to and including EOS
    advantage: torch.Tensor  # ()
    truncated: bool = False  # hit max_new_tokens without EOS or a stop sequence
    old_logprobs: Optional[torch.Tensor] = None  # (R,)
    ref_logprobs: Optional[torch.Tensor] = None  # (R,)
    trunk: Optional[torch.Tensor] = None  # (Q + R, H) the frozen trunk's output, kept from the rollout
    sampler_logprobs: Optional[torch.Tensor] = None  # (R,) the generator's, for the truncated importance weight
    version: int = 0  # the policy version (optimizer steps) that sampled it


@dataclass
class GroupBatch:
    query_tensors: torch.Tensor  # (B, Q) left-padded
    response_tensors: torch.Tensor  # (B, R) right-padded
    attention_mask: torch.Tensor  # (B, Q + R)
    position_ids: torch.Tensor  # (B, Q + R)
    response_mask: torch.Tensor  # (B, R) 1 on the tokens in the loss (none of a masked truncated sample)
    advantages: torch.Tensor  # (B,)
    old_logprobs: Optional[torch.Tensor] = None  # (B, R)
    ref_logprobs: Optional[torch.Tensor] = None  # (B, R)
    trunk: Optional[torch.Tensor] = None  # (B, Q + R, H)
    sampler_logprobs: Optional[torch.Tensor] = None  # (B, R)


def group_collate_fn(pad_token_id: int, mask_truncated: bool, elems: Iterable[GroupElement]) -> GroupBatch:
    elems = list(elems)

    def padded(name: str) -> Optional[torch.Tensor]:
        values = [getattr(e, name) for e in elems]
        if all(v is None for v in values):
            return None
        if any(v is None for v in values):
            raise ValueError(f"rollouts: {name} must be kept for every rollout of a batch or for none")
        return pad(values, 0.0, "right")

    # PPO's collate pads the prompts, responses and trunk the same way; its value/reward slots are unused here
    zeros = [torch.zeros(len(e.response_tensor)) for e in elems]
    base = ppo_collate_fn("left", pad_token_id, [
        PPORLElement(query_tensor=e.query_tensor, response_tensor=e.response_tensor, logprobs=z, values=z, rewards=z,
                     trunk=e.trunk) for e, z in zip(elems, zeros)])
    response_mask = base.response_mask
    if mask_truncated:
        keep = torch.tensor([not e.truncated for e in elems], dtype=response_mask.dtype)  # (B,)
        response_mask = response_mask * keep.unsqueeze(1)
    return GroupBatch(
        query_tensors=base.query_tensors, response_tensors=base.response_tensors, attention_mask=base.attention_mask,
        position_ids=base.position_ids, response_mask=response_mask,
        advantages=torch.stack([e.advantage.reshape(()) for e in elems]).float(),
        old_logprobs=padded("old_logprobs"), ref_logprobs=padded("ref_logprobs"), trunk=base.trunk,
        sampler_logprobs=padded("sampler_logprobs"),
    )


class GroupRolloutStorage(PPORolloutStorage):
    """The rollouts of one phase (PPO's storage: push, clear, export, index)."""

    def __init__(self, pad_token_id: int, mask_truncated: bool = False):
        super().__init__(pad_token_id, "left")
        self.mask_truncated = mask_truncated

    def collate(self, elems: Iterable[GroupElement]) -> GroupBatch:
        return group_collate_fn(self.pad_token_id, self.mask_truncated, elems)

    def create_loader(self, batch_size: int, shuffle: bool = False, **kwargs):
        from functools import partial

        from torch.utils.data import DataLoader

        collate = partial(group_collate_fn, self.pad_token_id, self.mask_truncated)
        return DataLoader(self, batch_size, shuffle=shuffle, collate_fn=collate, **kwargs)
