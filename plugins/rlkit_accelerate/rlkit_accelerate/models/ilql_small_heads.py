"""ILQL heads whose size does not grow with the vocabulary (``method.q_heads: embedding``).

trlX's Q head is an MLP ``h -> 2h -> |V|``: for SmolLM2-135M (h = 576, |V| = 49152) each Q head
holds 57 M parameters, and ILQL keeps two Q heads and two targets, 1.7x the model. Here each
Q head is a small MLP ``h -> 2h -> h`` whose output is read out through the model's own output
embedding ``E`` (its LM head weight, [|V|, h]), plus a per-token bias and a per-state offset::

    Q(s, a) = c(h_s) + E[a] . g(h_s) + b[a]

``c`` (a scalar read from the same hidden layer as ``g``) carries what all actions of a state
share (the state's value); without it the read-out through ``E`` had to carry V(s) along some
direction of the embedding space, and tokens far from the data along that direction (line
breaks, byte pieces) got large Q - V: Q-guided sampling at beta 4-16 wrote them. The layers
that write the per-token part (``g``'s last layer, ``b``) start at zero, so at initialisation Q
is the same for every token of a state and Q-guided sampling is the behaviour policy for any
beta (trlX's random MLP heads add noise of std ~1 to every token's logit).

``E`` is used detached: the Q loss does not move the LM head (the policy's own loss may), so
the head learns only ``g``, ``c`` and ``b``: ``4h^2 + 5h + 1 + |V|`` parameters, 1.4 M for
SmolLM2. The V head stays trlX's MLP ``h -> 2h -> 1``. Q is still computed only at the action
positions the caller selects (``actions_ixs``), over the whole vocabulary, which CQL's
logsumexp needs.
"""

from __future__ import annotations

import copy
from typing import Callable

import torch
from torch import nn

from rlkit_accelerate.models.heads import make_head
from rlkit_accelerate.models.ilql_heads import ILQLHeads

Q_HEADS = ("mlp", "embedding")


class EmbeddingQHead(nn.Module):
    """``hidden [.., h] -> Q [.., |V|]``: a per-state offset plus a read-out through the
    (detached) output embedding plus a per-token bias."""

    def __init__(self, hidden_size: int, vocab_size: int, output_embedding: Callable[[], torch.Tensor],
                 dtype: torch.dtype | None = None):
        super().__init__()
        self.features = nn.Sequential(
            nn.Linear(hidden_size, hidden_size * 2, dtype=dtype), nn.ReLU(), nn.Linear(hidden_size * 2, hidden_size, dtype=dtype)
        )
        self.offset = nn.Linear(hidden_size * 2, 1, dtype=dtype)  # c(h): what every action of the state shares
        nn.init.zeros_(self.features[2].weight)  # the per-token part starts flat (see the module docstring)
        nn.init.zeros_(self.features[2].bias)
        self.bias = nn.Parameter(torch.zeros(vocab_size, dtype=dtype))
        self.output_embedding = output_embedding  # a getter, not a submodule: the LM's weight stays the LM's

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        weight = self.output_embedding().detach()  # [V, h]
        inner = self.features[1](self.features[0](hidden))  # [.., 2h]
        return self.offset(inner) + self.features[2](inner) @ weight.to(hidden.dtype).T + self.bias  # [.., V]


class EmbeddingILQLHeads(ILQLHeads):
    """V head, one or two embedding Q heads and their Polyak-averaged targets; ``ILQLHeads``'
    forward and target sync, other Q heads."""

    def __init__(self, hidden_size: int, output_embedding: Callable[[], torch.Tensor], two_qs: bool = True,
                 alpha: float = 0.99, dtype: torch.dtype | None = None):
        nn.Module.__init__(self)  # not ILQLHeads.__init__: it would build the vocabulary-sized MLPs
        self.two_qs = two_qs
        self.alpha = alpha
        vocab_size = output_embedding().shape[0]
        self.v_head = make_head(hidden_size, 1, dtype)
        num_qs = 2 if two_qs else 1
        self.q_heads = nn.ModuleList(EmbeddingQHead(hidden_size, vocab_size, output_embedding, dtype) for _ in range(num_qs))
        self.target_q_heads = copy.deepcopy(self.q_heads).requires_grad_(False)


def make_ilql_heads(kind: str, hidden_size: int, lm_head: nn.Module, two_qs: bool = True, alpha: float = 0.99) -> nn.Module:
    """The ILQL heads for ``method.q_heads``: ``mlp`` (trlX's, the default) or ``embedding``,
    on the LM head's device and dtype."""
    weight = lm_head.weight
    if kind == "mlp":
        heads = ILQLHeads(hidden_size, weight.shape[0], two_qs, alpha, weight.dtype)
    elif kind == "embedding":
        heads = EmbeddingILQLHeads(hidden_size, lambda: lm_head.weight, two_qs, alpha, weight.dtype)
    else:
        raise ValueError(f"method.q_heads: unknown kind {kind!r}; use one of {', '.join(Q_HEADS)}")
    return heads.to(weight.device)


def head_parameters(heads: nn.Module) -> dict[str, int]:
    """Parameter counts of ILQL heads: ``v``, ``q`` (online Q heads) and ``target_q``."""
    count = lambda module: sum(p.numel() for p in module.parameters())  # noqa: E731
    return {"v": count(heads.v_head), "q": count(heads.q_heads), "target_q": count(heads.target_q_heads)}
