"""KL controllers for PPO's per-token KL penalty (no torch needed).

Adaptive controller (Ziegler et al. 2019, "Fine-Tuning Language Models from Human
Preferences", §2.2)::

    e_t     = clip(KL_t / KL_target - 1, -0.2, 0.2)
    beta_t+1 = beta_t * (1 + e_t * n_steps / horizon)

rlkit calls ``update`` once per rollout phase with ``n_steps`` = the number of rollouts of
that phase (trlX called it after every backward pass with ``n_steps = batch_size``).
"""

from __future__ import annotations

import math


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
