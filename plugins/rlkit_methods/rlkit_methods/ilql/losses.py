"""ILQL losses as pure functions (Snell et al. 2022, "Offline RL for Natural Language
Generation with Implicit Language Q Learning").

Shapes: B = batch, A = actions (output tokens), S = A + 1 states, V = vocabulary.
``dones`` (B, S) is trlX's flag: 1 for a state that is followed by another, 0 for the final
state and for padding, so ``dones[:, :-1]`` masks the real actions and ``dones[:, 1:]``
zeroes the value after the last one.
"""

from __future__ import annotations

from functools import reduce
from typing import Any, Sequence

import torch
import torch.nn.functional as F

from rlkit_methods.common.stats import flatten_dict, tensor_stats


def expectile_loss(diff: torch.Tensor, tau: float) -> torch.Tensor:
    """L_tau(u) = |tau - 1(u < 0)| * u^2, elementwise, with u = Q_target - V."""
    weight = torch.where(diff >= 0, torch.full_like(diff, tau), torch.full_like(diff, 1 - tau))
    return weight * diff.pow(2)


def q_target(rewards: torch.Tensor, vs: torch.Tensor, dones: torch.Tensor, gamma: float) -> torch.Tensor:
    """y_t = r_t + gamma * V(s_{t+1}) * (1 - terminal_{t+1}), detached: (B, A)."""
    v_next = vs[:, 1:] * dones[:, 1:].to(vs.dtype)  # (B, A)
    return (rewards + gamma * v_next).detach()


def cql_loss(q: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """Conservative Q-learning term with Q as logits: sum m * CE(softmax(Q), a) / n."""
    B, A, V = q.shape
    ce = F.cross_entropy(q.reshape(-1, V), actions.reshape(-1), reduction="none").reshape(B, A)
    return (ce * mask).sum() / n


def awac_loss(
    action_logits: torch.Tensor, actions: torch.Tensor, weights: torch.Tensor, mask: torch.Tensor, n: torch.Tensor
) -> torch.Tensor:
    """Advantage-weighted behaviour cloning: sum m * w * CE(pi, a) / n, w = exp(beta (Q - V))."""
    B, A, V = action_logits.shape
    ce = F.cross_entropy(action_logits.reshape(-1, V), actions.reshape(-1), reduction="none").reshape(B, A)
    return (ce * weights * mask).sum() / n


def ilql_loss(
    action_logits: torch.Tensor,
    qs: Sequence[torch.Tensor],
    target_qs: Sequence[torch.Tensor],
    vs: torch.Tensor,
    actions: torch.Tensor,
    rewards: torch.Tensor,
    dones: torch.Tensor,
    *,
    gamma: float,
    tau: float,
    cql_scale: float,
    awac_scale: float,
    beta: float,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """The ILQL objective::

        Q_i(s_t, a_t)   from each Q head;   Q_hat = min_i Q_target_i(s_t, a_t)  (two_qs)
        L_Q    = sum_i sum_t m_t (Q_i - (r_t + gamma V(s_{t+1})))^2 / n
        L_V    = sum_t m_t L_tau(Q_hat - V(s_t)) / n
        L_CQL  = sum_i sum_t m_t CE(Q_i(s_t, .), a_t) / n
        L_AWAC = sum_t m_t exp(beta (Q_hat - V(s_t))) CE(pi(. | s_t), a_t) / n
        L      = L_Q + L_V + cql_scale L_CQL + awac_scale L_AWAC

    with m = dones[:, :-1] the real actions and n = max(1, sum m).
    ``action_logits`` (B, A, V) are the LM logits at the action positions; ``qs`` and
    ``target_qs`` are (B, A, V) each; ``vs`` is (B, S) or (B, S, 1); ``actions`` (B, A).
    """
    if vs.dim() == 3:
        vs = vs[..., 0]  # (B, S)
    mask = dones[:, :-1].to(vs.dtype)  # (B, A)
    n = mask.sum().clamp(min=1)
    act = actions.unsqueeze(-1)  # (B, A, 1)
    Q = [q.gather(-1, act).squeeze(-1) for q in qs]  # each (B, A)
    target_q = reduce(torch.minimum, [q.gather(-1, act).squeeze(-1) for q in target_qs]).detach()  # (B, A)
    V = vs[:, :-1]  # (B, A) values of the states where the actions are taken
    y = q_target(rewards, vs, dones, gamma)  # (B, A)

    loss_q = sum(((Qi - y) * mask).pow(2).sum() / n for Qi in Q)
    loss_v = (expectile_loss(target_q - V, tau) * mask).sum() / n
    loss_cql = sum(cql_loss(q, actions, mask, n) for q in qs)
    with torch.no_grad():
        awac_weight = torch.exp(beta * (target_q - V))  # (B, A)
    loss_awac = awac_loss(action_logits, actions, awac_weight, mask, n)
    loss = loss_q + loss_v + cql_scale * loss_cql + awac_scale * loss_awac

    stats = {
        "losses": {
            "loss": loss.item(),
            "loss_q": loss_q.item(),
            "loss_v": loss_v.item(),
            "loss_cql": loss_cql.item(),
            "loss_awac": loss_awac.item(),
        },
        "values": tensor_stats(V.detach(), mask, n),
        "qvalues": {str(i): tensor_stats(q.detach(), mask, n) for i, q in enumerate(Q)},
        "awac_weight": tensor_stats(awac_weight, mask, n),
    }
    return loss, flatten_dict(stats)


def batched_index_select(x: torch.Tensor, idxs: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """Gather vectors of x (B, T, H) at idxs (B, I) along ``dim`` -> (B, I, H)."""
    idxs = idxs.unsqueeze(-1).expand(idxs.shape[0], idxs.shape[1], x.shape[-1])
    return x.gather(dim=dim, index=idxs)
