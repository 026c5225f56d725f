"""Tensor-parallel heads on a Megatron GPT's final hidden states (last pipeline stage only).

* :class:`ParallelMLPHead` — trlX's ``make_head`` (Linear(h, 2h) -> ReLU -> Linear(2h, out))
  split Megatron-style: the first layer column-parallel, the second row-parallel, so each TP
  rank holds half of the 2h units and the row-parallel all-reduce gives every rank the same
  output. The PPO value head and ILQL's V head.
* :class:`ScoreHead` — a reward model's bias-free linear head (HF's ``score``).
* :class:`VocabParallelQHead` — the same MLP ending in a column-parallel layer over the
  vocabulary, so Q(s, .) stays split over TP ranks like the LM logits.
* :class:`ILQLHeads` — V, one or two Q heads and their frozen target copies.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from megatron.core import tensor_parallel
from megatron.core.transformer import TransformerConfig


def linear_init(fan_in: int):
    """torch's ``nn.Linear`` weight initialisation, U(-1/sqrt(fan_in), 1/sqrt(fan_in)), as
    trlX's heads have (Megatron's default, N(0, 0.02) and a smaller output layer, starts Q and
    V several times smaller and ILQL learns slower from it). The bound is the whole layer's,
    so it is the same whether the master weight or one TP partition is initialised; biases
    start at zero (Megatron's rule)."""
    bound = 1.0 / math.sqrt(fan_in)
    return lambda weight: torch.nn.init.uniform_(weight, -bound, bound)


class ParallelMLPHead(nn.Module):
    """(B, S, H) -> (B, S, out), identical on every TP rank."""

    def __init__(self, config: TransformerConfig, hidden_size: int, out_size: int = 1):
        super().__init__()
        self.up = tensor_parallel.ColumnParallelLinear(
            hidden_size, 2 * hidden_size, config=config, init_method=linear_init(hidden_size), bias=True, gather_output=False
        )
        self.down = tensor_parallel.RowParallelLinear(
            2 * hidden_size, out_size, config=config, init_method=linear_init(2 * hidden_size),
            bias=True, input_is_parallel=True, skip_bias_add=False,
        )

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        h, _ = self.up(hidden)  # (B, S, 2H / tp)
        out, _ = self.down(torch.relu(h))  # (B, S, out), all-reduced over TP
        return out


class ScoreHead(nn.Module):
    """A reward model's head, HF's ``score``: (B, S, H) -> (B, S, 1) by one bias-free linear
    map, replicated on every TP rank (h values in, one out: nothing worth splitting), zero at
    the start as the accelerate engine's (``rlkit_methods.preferences.export``)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        from rlkit_methods.engine_kit import make_score_head

        self.score = make_score_head(hidden_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.score(hidden)


class VocabParallelQHead(nn.Module):
    """(B, S, H) -> Q (B, S, V / tp): this rank's slice of the vocabulary."""

    def __init__(self, config: TransformerConfig, hidden_size: int, vocab_size: int):
        super().__init__()
        # the vocabulary split needs the full 2H activations on every rank: gather them once
        self.up = tensor_parallel.ColumnParallelLinear(
            hidden_size, 2 * hidden_size, config=config, init_method=linear_init(hidden_size), bias=True, gather_output=True
        )
        self.out = tensor_parallel.ColumnParallelLinear(
            2 * hidden_size, vocab_size, config=config, init_method=linear_init(2 * hidden_size),
            bias=True, gather_output=False,
        )

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        h, _ = self.up(hidden)  # (B, S, 2H)
        q, _ = self.out(torch.relu(h))  # (B, S, V / tp)
        return q


def gather_positions(x: torch.Tensor, ixs: torch.Tensor) -> torch.Tensor:
    """x (B, T, H) at ixs (B, I) -> (B, I, H)."""
    return x.gather(1, ixs.unsqueeze(-1).expand(*ixs.shape, x.shape[-1]))


class ILQLHeads(nn.Module):
    """ILQL's heads (Snell et al. 2022): V(s), Q_i(s, .) and target Q_i, trlX's layout."""

    def __init__(self, config: TransformerConfig, hidden_size: int, vocab_size: int, two_qs: bool = True, alpha: float = 0.99):
        super().__init__()
        self.alpha = alpha
        self.v_head = ParallelMLPHead(config, hidden_size, 1)
        n = 2 if two_qs else 1
        self.q_heads = nn.ModuleList(VocabParallelQHead(config, hidden_size, vocab_size) for _ in range(n))
        # built, then copied: Megatron layers hold process groups, which deepcopy cannot copy
        self.target_q_heads = nn.ModuleList(VocabParallelQHead(config, hidden_size, vocab_size) for _ in range(n))
        self.target_q_heads.load_state_dict(self.q_heads.state_dict())
        self.target_q_heads.requires_grad_(False)
        # fp32 under half-precision training (rlkit_nemo.precision): at alpha 0.001 a Polyak
        # step is smaller than bf16's spacing near the weights, so bf16 targets barely move
        self.target_q_heads.keeps_fp32 = True

    def forward(self, hidden: torch.Tensor, states_ixs: torch.Tensor, actions_ixs: torch.Tensor):
        """hidden (B, T, H) -> (qs, target_qs, vs): Q heads (B, A, V / tp) at the actions,
        V (B, S, 1) at the states."""
        states, actions = gather_positions(hidden, states_ixs), gather_positions(hidden, actions_ixs)
        qs = tuple(q(actions) for q in self.q_heads)
        with torch.no_grad():
            target_qs = tuple(q(actions.to(q.out.weight.dtype)) for q in self.target_q_heads)
        return qs, target_qs, self.v_head(states)

    @torch.no_grad()
    def sync_target_q_heads(self, alpha: float | None = None) -> None:
        """Polyak update: target <- alpha * Q + (1 - alpha) * target (trlX's rule)."""
        alpha = self.alpha if alpha is None else alpha
        for target, q in zip(self.target_q_heads, self.q_heads):
            for tp, qp in zip(target.parameters(), q.parameters()):
                tp.copy_(alpha * qp.to(tp.dtype) + (1 - alpha) * tp)  # in the target's (fp32) precision
