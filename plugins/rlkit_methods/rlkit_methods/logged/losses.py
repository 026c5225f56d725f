"""Policy gradient from logged completions, as pure functions.

The data are N logged rows (x_i, y_i, r_i), several completions per prompt, sampled by a
behaviour policy mu that may differ from the policy pi being trained. Advantages are relative
to the other completions of the same prompt, so no value model is needed: group-relative as
GRPO (Shao et al. 2024) or leave-one-out as RLOO (Kool et al. 2019; Ahmadian et al. 2024).
When mu's per-token log-probs were logged, each token's gradient is weighted by the
truncated importance ratio min(pi/mu, c) (IMPALA's rho-bar, Espeholt et al. 2018).

What it is, and where it is biased: with mu = pi (on-policy rows) the weights are exactly 1
and this is REINFORCE with a group baseline. Per-token ratios correct each token's action
probability but not the distribution of the prefixes mu visited, and the cap c trades that
remaining bias for variance; without mu's log-probs nothing is corrected, which is unbiased
only while pi stays close to the policy that logged the rows (the first steps on data logged
from the initial model).

Shapes: N rows of the data set, B rows of a micro-batch, R response tokens (right-padded),
``mask`` (B, R) 1 on the real completion tokens.
"""

from __future__ import annotations

import torch

ADVANTAGES = ("grpo", "rloo")
STD_EPS = 1e-4  # as GRPO: (r - mean) / (std + 1e-4)


def _group_sums(values: torch.Tensor, groups: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row sum and size of its group: (N,), (N,) -> (N,), (N,)."""
    n_groups = int(groups.max()) + 1 if groups.numel() else 0
    sums = torch.zeros(n_groups, dtype=values.dtype).index_add_(0, groups, values)  # (G,)
    sizes = torch.zeros(n_groups, dtype=values.dtype).index_add_(0, groups, torch.ones_like(values))  # (G,)
    return sums[groups], sizes[groups]


def group_relative_advantages(rewards: torch.Tensor, groups: torch.Tensor, scale: bool = True) -> torch.Tensor:
    """GRPO's advantages over groups of any size, (N,) rewards and (N,) group ids -> (N,)::

        A_i = (r_i - mean_{j in g(i)} r_j) / (std_{j in g(i)} r_j + 1e-4)

    with the unbiased std (no division when ``scale`` is False: Dr. GRPO). A row alone in its
    group gets 0: it has nothing to be compared with.
    """
    r = rewards.double()
    total, size = _group_sums(r, groups)
    advantages = r - total / size  # (N,)
    if scale:
        squares, _ = _group_sums(advantages**2, groups)
        std = torch.where(size > 1, (squares / (size - 1).clamp(min=1)).sqrt(), torch.zeros_like(r))
        advantages = advantages / (std + STD_EPS)
    return torch.where(size > 1, advantages, torch.zeros_like(r)).float()


def leave_one_out_advantages(rewards: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """RLOO's advantages, (N,) -> (N,): each row's reward minus the mean of the others'::

        A_i = r_i - 1/(k-1) sum_{j in g(i), j != i} r_j        (k = |g(i)|)

    (0 for a row alone in its group).
    """
    r = rewards.double()
    total, size = _group_sums(r, groups)
    baseline = (total - r) / (size - 1).clamp(min=1)
    return torch.where(size > 1, r - baseline, torch.zeros_like(r)).float()


def advantages_of(kind: str, rewards: torch.Tensor, groups: torch.Tensor, scale_rewards: bool = True) -> torch.Tensor:
    if kind == "grpo":
        return group_relative_advantages(rewards, groups, scale=scale_rewards)
    if kind == "rloo":
        return leave_one_out_advantages(rewards, groups)
    raise ValueError(f"advantage: {kind!r} is not one of {', '.join(ADVANTAGES)}")


def importance_weights(logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor, mask: torch.Tensor,
                       cap: float | None) -> torch.Tensor:
    """Truncated per-token importance weights, (B, R) -> (B, R), no gradient::

        w_t = min(pi(y_t | x, y_<t) / mu(y_t | x, y_<t), c)

    computed as exp(log pi - log mu), so w_t is exactly 1 where the two log-probs are equal
    (the rows were logged by the current policy); 0 off the mask; ``cap`` None: no truncation.
    """
    w = torch.exp(logprobs.detach().float() - behaviour_logprobs.float())  # (B, R)
    if cap is not None:
        w = w.clamp(max=cap)
    return w * mask


def logged_pg_loss(logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                   weights: torch.Tensor | None = None) -> torch.Tensor:
    """The policy-gradient surrogate, a scalar over B rows::

        L = -1/B sum_i 1/|y_i| sum_t w_it A_i log pi(y_it | x_i, y_i,<t)

    with w = 1 when no behaviour log-probs were logged. Each row counts equally whatever its
    length (GRPO's per-sequence mean), so micro-batches weighted by their rows give the
    same step as one batch.
    """
    w = mask if weights is None else weights * mask  # (B, R)
    per_row = (w * logprobs).sum(-1) / mask.sum(-1).clamp(min=1)  # (B,)
    return -(advantages * per_row).mean()
