"""Preference losses as pure functions: the Bradley-Terry reward-model loss and DPO with TRL's
loss names.

Bradley-Terry (Bradley & Terry 1952; the InstructGPT reward model, Ouyang et al. 2022), with
TRL ``RewardTrainer``'s ``margin`` (Llama 2, Touvron et al. 2023) and
``center_rewards_coefficient`` (Eisenstein et al. 2023). DPO: Rafailov et al. 2023; label
smoothing of conservative DPO (Mitchell 2023); IPO: Azar et al. 2023 (eq. 17); hinge: SLiC
(Zhao et al. 2023). Field names and metric names are TRL's (``DPOTrainer``, ``RewardTrainer``).

Shapes: B pairs, R response tokens (right-padded), ``mask`` 1 on the real response tokens.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

DPO_LOSS_TYPES = ("sigmoid", "ipo", "hinge")


def bradley_terry_loss(rewards_chosen: torch.Tensor, rewards_rejected: torch.Tensor,
                       margin: torch.Tensor | None = None, center_rewards_coefficient: float | None = None) -> torch.Tensor:
    """The pairwise reward-model loss, one scalar over B pairs::

        L = -1/B sum_i log sigma(r(x_i, y_i^c) - r(x_i, y_i^r) - m_i)
            + c * 1/B sum_i (r(x_i, y_i^c) + r(x_i, y_i^r))^2

    ``margin`` m (B,) is how much better the chosen answer is (0 without it); the second term,
    with ``center_rewards_coefficient`` c, pulls the rewards towards mean 0.
    """
    diff = rewards_chosen.float() - rewards_rejected.float()  # (B,)
    if margin is not None:
        diff = diff - margin.float()
    loss = -F.logsigmoid(diff).mean()
    if center_rewards_coefficient:
        loss = loss + center_rewards_coefficient * ((rewards_chosen.float() + rewards_rejected.float()) ** 2).mean()
    return loss


def pairwise_accuracy(rewards_chosen: torch.Tensor, rewards_rejected: torch.Tensor) -> torch.Tensor:
    """The fraction of pairs whose chosen answer scores higher, a tie counting half (what a
    coin toss between equal scores gets): chance, and a fresh zero score head, give 0.5."""
    wins = (rewards_chosen > rewards_rejected).float() + 0.5 * (rewards_chosen == rewards_rejected).float()
    return wins.mean()


def sequence_logps(logprobs: torch.Tensor, mask: torch.Tensor, average: bool = False) -> torch.Tensor:
    """log pi(y | x) = sum_t m_t log pi(y_t | x, y_<t), (B, R) -> (B,); with ``average`` the
    mean over the real tokens (IPO's length-normalised log-likelihood, as TRL)."""
    total = (logprobs * mask).sum(-1)  # (B,)
    return total / mask.sum(-1).clamp(min=1) if average else total


def dpo_loss(chosen_logps: torch.Tensor, rejected_logps: torch.Tensor,
             ref_chosen_logps: torch.Tensor, ref_rejected_logps: torch.Tensor, *,
             beta: float, loss_type: str = "sigmoid", label_smoothing: float = 0.0,
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-pair DPO losses and the implicit rewards, all (B,).

    With h = [log pi(y^c|x) - log pi_ref(y^c|x)] - [log pi(y^r|x) - log pi_ref(y^r|x)]::

        sigmoid: L = -(1 - eps) log sigma(beta h) - eps log sigma(-beta h)   (eps: label_smoothing)
        ipo:     L = (h - 1 / (2 beta))^2                                    (log-probs averaged per token)
        hinge:   L = max(0, 1 - beta h)

    and the implicit rewards r^c = beta (log pi(y^c|x) - log pi_ref(y^c|x)), r^r likewise
    (detached), which TRL logs as ``rewards/chosen`` and ``rewards/rejected``.
    """
    chosen_logratios = chosen_logps - ref_chosen_logps  # (B,)
    rejected_logratios = rejected_logps - ref_rejected_logps  # (B,)
    h = chosen_logratios - rejected_logratios  # (B,)
    if loss_type == "sigmoid":
        losses = -(1 - label_smoothing) * F.logsigmoid(beta * h) - label_smoothing * F.logsigmoid(-beta * h)
    elif loss_type == "ipo":
        losses = (h - 1 / (2 * beta)) ** 2
    elif loss_type == "hinge":
        losses = torch.relu(1 - beta * h)
    else:
        raise ValueError(f"loss_type: {loss_type!r} is not one of {', '.join(DPO_LOSS_TYPES)}")
    return losses, beta * chosen_logratios.detach(), beta * rejected_logratios.detach()


def dpo_metrics(chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor,
                chosen_logps: torch.Tensor, rejected_logps: torch.Tensor) -> dict[str, float]:
    """TRL's DPO metrics over a batch: mean implicit rewards, the fraction of pairs whose
    chosen reward is higher, their mean margin, and the mean log-probs."""
    return {
        "rewards/chosen": chosen_rewards.mean().item(),
        "rewards/rejected": rejected_rewards.mean().item(),
        "rewards/accuracies": (chosen_rewards > rejected_rewards).float().mean().item(),
        "rewards/margins": (chosen_rewards - rejected_rewards).mean().item(),
        "logps/chosen": chosen_logps.detach().mean().item(),
        "logps/rejected": rejected_logps.detach().mean().item(),
    }
