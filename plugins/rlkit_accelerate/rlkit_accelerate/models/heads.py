"""Heads and branches: trlX's MLP head, copies of the top blocks (value branch, hydra reference),
and the freezing rule for ``num_layers_unfrozen``."""

from __future__ import annotations

import copy

import torch
from torch import nn

from rlkit_core.errors import ConfigError

from rlkit_accelerate.models.blocks import BranchInput, DecoderLayout, run_blocks, run_post


def make_head(n_embd: int, out: int, dtype: torch.dtype | None = None) -> nn.Sequential:
    """trlX's head: Linear(h, 2h) -> ReLU -> Linear(2h, out)."""
    return nn.Sequential(
        nn.Linear(n_embd, n_embd * 2, dtype=dtype),
        nn.ReLU(),
        nn.Linear(n_embd * 2, out, dtype=dtype),
    )


class Branch(nn.Module):
    """Copies of the top ``num_layers`` blocks and the post-block modules (final norm), then an
    optional head. Runs on the trunk's hidden state at block ``num_blocks - num_layers``."""

    def __init__(self, layout: DecoderLayout, num_layers: int, head: nn.Module | None, frozen: bool):
        super().__init__()
        top = list(layout.blocks)[layout.num_blocks - num_layers :] if num_layers > 0 else []
        self.blocks = nn.ModuleList(copy.deepcopy(block) for block in top)
        self.post = nn.ModuleList(copy.deepcopy(module) for module in layout.post)
        self.head = head
        self.frozen = frozen
        # copies inherit the originals' requires_grad (maybe frozen by freeze_trunk): reset it
        self.requires_grad_(not frozen)
        if frozen:
            self.eval()

    @property
    def lm_head(self) -> nn.Module | None:
        """trlX's name for the head of a hydra reference (``frozen_head.lm_head``)."""
        return self.head

    def train(self, mode: bool = True) -> "Branch":
        # a frozen branch is a fixed target: never dropout
        return super().train(mode and not self.frozen)

    def forward(self, hidden: torch.Tensor, branch: BranchInput, keep: int | None = None) -> torch.Tensor:
        """The branch's blocks, final norm and head; the head on the last ``keep`` positions when given."""
        hidden = run_post(self.post, run_blocks(self.blocks, hidden, branch))  # [B, T, H]
        hidden = hidden if keep is None else hidden[:, -keep:]  # [B, K, H]
        return hidden if self.head is None else self.head(hidden)


def hydra_reference(layout: DecoderLayout, num_layers: int) -> Branch:
    """Frozen copy of the top ``num_layers`` blocks, final norm and LM head: with the frozen
    trunk below it, it computes the initial policy's logits."""
    return Branch(layout, num_layers, copy.deepcopy(layout.lm_head), frozen=True)


def _names_of(model: nn.Module, modules: list[nn.Module]) -> list[str]:
    ids = {id(m) for m in modules}
    return [name for name, m in model.named_modules(remove_duplicate=False) if id(m) in ids]


def freeze_trunk(model: nn.Module, layout: DecoderLayout, num_layers_unfrozen: int) -> None:
    """trlX's ``freeze_bottom_causal_layers``, made exact.

    ``-1``: nothing is frozen (requires_grad is left as it is). ``k >= 0``: the top ``k``
    blocks, the post-block modules (final norm) and the LM head train; everything below the
    branch point is frozen, including what trlX missed (GPT-2's position embeddings), so the
    trunk the hydra reference reads never moves. An LM head tied to the input embeddings is part of the trunk and stays frozen (trlX
    did the same); an untied head trains, also for ``k = 0`` (trlX froze it there).
    """
    if num_layers_unfrozen < 0:
        return
    top = list(layout.blocks)[layout.num_blocks - num_layers_unfrozen :] if num_layers_unfrozen else []
    top += [*layout.post, layout.lm_head]
    prefixes = tuple(name + "." for name in _names_of(model, top))
    model.requires_grad_(False)
    for module in top:
        module.requires_grad_(True)
    # a parameter also reachable from outside the top (a tied head) belongs to the trunk
    for name, param in model.named_parameters(remove_duplicate=False):
        if not name.startswith(prefixes):
            param.requires_grad_(False)


def check_unfrozen(name: str, value: int, num_blocks: int, allow_all: bool) -> None:
    low = -1 if allow_all else 0
    if not low <= value <= num_blocks:
        what = "-1 (all) or " if allow_all else ""
        raise ConfigError(
            f"model.{name}: {value} is out of range; use {what}0..{num_blocks} (the model has {num_blocks} blocks)"
        )
