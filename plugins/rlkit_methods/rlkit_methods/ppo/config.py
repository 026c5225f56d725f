"""``PPOConfig``: trlX's PPO method section, with ranges checked (torch-free module)."""

from __future__ import annotations

from typing import Any, Optional

import attrs

from rlkit_core.config import MethodConfig, TRLConfig, at_least, finite, in_closed_interval, non_negative, one_of, positive

from rlkit_methods.common.defaults import number as _number
from rlkit_methods.common.defaults import trlx_default_config
from rlkit_methods.common.kl import make_kl_controller

SCALE_REWARD = (None, "ignored", "running", "ref", "whiten")


def no_scaling_if_false(value: Any) -> Any:
    """trlX's configs write ``scale_reward: False`` for no scaling (its trainer scales only for
    "running" and "ref"); rlkit spells that ``None``."""
    return None if value is False else value


@attrs.define
class PPOConfig(MethodConfig):
    """Proximal policy optimisation (trlX's fields and meanings).

    :param ppo_epochs: updates per batch of rollouts
    :param num_rollouts: rollouts collected per rollout phase
    :param chunk_size: prompts per generation call
    :param init_kl_coef: initial KL coefficient beta
    :param target: target KL for the adaptive controller; None keeps beta fixed
    :param horizon: steps for the adaptive controller to move beta
    :param gamma: discount; :param lam: GAE lambda
    :param cliprange: policy ratio clip eps; :param cliprange_value: value clip
    :param vf_coef: value loss weight
    :param scale_reward: None/"ignored" (or False, trlX's spelling), "running", "ref" or "whiten"
    :param ref_mean, ref_std: reference score statistics (None: taken from the first rollouts)
    :param cliprange_reward: clip scores to [-c, c] (0 turns it off)
    :param gen_kwargs: generation kwargs; :param gen_experience_kwargs: used for rollouts if set
    :param num_value_layers_unfrozen: layers of the value branch (0: a head on the trunk)
    :param vllm_importance_sampling_correction: weigh the policy-gradient term by the truncated
        importance ratio min(pi_old / mu, C) of the trainer's log-probs over the generator's
        (TRL 1.16's name; any generator, and rollouts of an older policy with train.async_rollouts)
    :param vllm_importance_sampling_clip_max: its cap C
    """

    name: str = "PPOConfig"
    ppo_epochs: int = attrs.field(default=4, validator=positive)
    num_rollouts: int = attrs.field(default=128, validator=positive)
    chunk_size: int = attrs.field(default=128, validator=positive)
    init_kl_coef: float = attrs.field(default=0.001, validator=_number(non_negative))
    target: Optional[float] = attrs.field(default=None, validator=_number(positive))
    horizon: int = attrs.field(default=10000, validator=positive)
    gamma: float = attrs.field(default=1.0, validator=_number(in_closed_interval(0, 1)))
    lam: float = attrs.field(default=0.95, validator=_number(in_closed_interval(0, 1)))
    cliprange: float = attrs.field(default=0.2, validator=_number(positive))
    cliprange_value: float = attrs.field(default=0.2, validator=_number(positive))
    vf_coef: float = attrs.field(default=1.0, validator=_number(non_negative))
    scale_reward: Optional[str] = attrs.field(
        default="ignored", converter=no_scaling_if_false, validator=one_of(*SCALE_REWARD)
    )
    ref_mean: Optional[float] = attrs.field(default=None, validator=finite)
    ref_std: Optional[float] = attrs.field(default=None, validator=_number(positive))
    cliprange_reward: float = attrs.field(default=10.0, validator=_number(non_negative))
    gen_kwargs: dict[str, Any] = attrs.field(
        factory=lambda: dict(max_new_tokens=40, top_k=0, top_p=1.0, do_sample=True)
    )
    gen_experience_kwargs: Optional[dict[str, Any]] = None
    num_topk_samples: int = attrs.field(default=1, validator=positive)
    num_value_layers_unfrozen: int = attrs.field(default=0, validator=at_least(0))
    vllm_importance_sampling_correction: bool = False
    vllm_importance_sampling_clip_max: float = attrs.field(default=3.0, validator=_number(positive))

    # trlX's methods, delegating to the pure functions ------------------------------------

    def get_advantages_and_returns(self, values, rewards, response_length=None, use_whitening=True, mask=None, all_reduce=None):
        """GAE advantages and returns (returns before whitening); see
        :func:`rlkit_methods.ppo.losses.gae_advantages_and_returns`. ``response_length``
        (trlX's argument) limits the computation to the first tokens; ``all_reduce`` (the
        engine's sum over data-parallel ranks) whitens over every rank's batch."""
        from rlkit_methods.common.stats import whiten
        from rlkit_methods.ppo.losses import gae_advantages_and_returns

        if response_length is not None:
            values, rewards = values[:, :response_length], rewards[:, :response_length]
            mask = None if mask is None else mask[:, :response_length]
        advantages, returns = gae_advantages_and_returns(values, rewards, self.gamma, self.lam, mask)
        if use_whitening:
            advantages = whiten(advantages, mask, all_reduce=all_reduce)
        return advantages.detach(), returns

    def loss(self, logprobs, values, old_logprobs, old_values, advantages, returns, mask):
        """The PPO loss ``(loss, stats)``; see :func:`rlkit_methods.ppo.losses.ppo_loss`."""
        from rlkit_methods.ppo.losses import ppo_loss

        return ppo_loss(
            logprobs, values, old_logprobs, old_values, advantages, returns, mask,
            cliprange=self.cliprange, cliprange_value=self.cliprange_value, vf_coef=self.vf_coef,
        )

    def make_kl_controller(self):
        """Adaptive when ``target`` is set, fixed otherwise."""
        return make_kl_controller(self.init_kl_coef, self.target, self.horizon)


def default_ppo_config() -> TRLConfig:
    """trlX's ``default_ppo_config`` (model: the offline SmolLM2-135M source)."""
    return trlx_default_config(
        PPOConfig(
            name="PPOConfig", num_rollouts=128, chunk_size=128, ppo_epochs=4, init_kl_coef=0.001,
            target=None, horizon=10000, gamma=1.0, lam=0.95, cliprange=0.2, cliprange_value=0.2,
            vf_coef=1.0, scale_reward="ignored", ref_mean=None, ref_std=None, cliprange_reward=10.0,
            gen_kwargs=dict(max_new_tokens=40, top_k=0, top_p=1.0, do_sample=True),
        ),
        trainer="AcceleratePPOTrainer", seq_length=1024, batch_size=32, total_steps=10000,
        checkpoint_interval=10000, lr=3e-5, num_layers_unfrozen=2,
    )
