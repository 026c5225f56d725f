"""KL estimators and controllers, written once for every method (no torch import).

Estimators (Schulman 2020, "Approximating KL divergence"), per token, for KL(p || q) from
samples x ~ p, given ``log_ratio = log p(x) - log q(x)`` (a tensor)::

    k1 = log p(x) - log q(x)                    unbiased, can be negative
    k3 = (q(x)/p(x) - 1) - log(q(x)/p(x))        unbiased, always >= 0

PPO's KL penalty is k1 of the policy against the reference; GRPO's KL term is k3 of the same.
The ``approx_kl`` statistics (trlX's, kept for their figures) and PPO's logged KL are k3 with
the ratio the other way round: ``k3(-log_ratio) = (r - 1) - log r`` with ``r = p/q``.

KL controllers for PPO's per-token KL penalty:

Adaptive controller (Ziegler et al. 2019, "Fine-Tuning Language Models from Human
Preferences", §2.2)::

    e_t     = clip(KL_t / KL_target - 1, -0.2, 0.2)
    beta_t+1 = beta_t * (1 + e_t * n_steps / horizon)

rlkit calls ``update`` once per rollout phase with ``n_steps`` = the number of rollouts of
that phase (trlX called it after every backward pass with ``n_steps = batch_size``).
"""

from __future__ import annotations

import math


def k1(log_ratio):
    """k1 = log p - log q per token (the log-ratio itself)."""
    return log_ratio


def k3(log_ratio):
    """k3 = (q/p - 1) - log(q/p) per token, >= 0, from ``log_ratio = log p - log q``."""
    return (-log_ratio).expm1() + log_ratio


class AdaptiveKLController:
    """trlX's ``AdaptiveKLController(init_kl_coef, target, horizon)``; the coefficient is ``.value``."""

    def __init__(self, init_kl_coef: float, target: float, horizon: int):
        if not target > 0:
            raise ValueError(f"target: must be > 0 for the adaptive KL controller, got {target!r}")
        if not horizon > 0:
            raise ValueError(f"horizon: must be > 0, got {horizon!r}")
        self.value = float(init_kl_coef)
        self.target = float(target)
        self.horizon = horizon

    def update(self, current: float, n_steps: int) -> float:
        """beta_{t+1} = beta_t * (1 + clip(current / target - 1, -0.2, 0.2) * n_steps / horizon)."""
        current = float(current)
        if not math.isfinite(current):
            raise ValueError(f"KL controller: current KL is {current}; check the reference model and logprobs")
        proportional_error = min(max(current / self.target - 1, -0.2), 0.2)  # e_t
        mult = 1 + proportional_error * n_steps / self.horizon
        self.value *= mult  # beta_{t+1}
        return self.value

    def state_dict(self) -> dict:
        return {"value": self.value}

    def load_state_dict(self, state: dict) -> None:
        self.value = float(state["value"])


class FixedKLController:
    """A KL coefficient that never changes (``method.target`` is None)."""

    def __init__(self, kl_coef: float):
        self.value = float(kl_coef)

    def update(self, current: float, n_steps: int) -> float:
        return self.value

    def state_dict(self) -> dict:
        return {"value": self.value}

    def load_state_dict(self, state: dict) -> None:
        self.value = float(state["value"])


def make_kl_controller(init_kl_coef: float, target: float | None, horizon: int):
    """Adaptive when ``target`` is set, fixed otherwise (trlX's rule)."""
    if target is not None:
        return AdaptiveKLController(init_kl_coef, target, horizon)
    return FixedKLController(init_kl_coef)
