"""``GRPOConfig`` and ``RLOOConfig``: TRL's field names and defaults where they mean the same
thing, trlX's for the loop (torch-free module).

TRL -> rlkit: ``generation_batch_size`` per process is ``num_rollouts`` (samples per rollout
phase on each rank), ``per_device_train_batch_size * gradient_accumulation_steps`` is
``train.batch_size`` (rows per optimizer step) with micro-batches of ``train.minibatch_size``,
``max_completion_length`` / ``temperature`` / ``top_p`` / ``top_k`` are ``gen_kwargs``
(``max_new_tokens`` ...), ``learning_rate`` is ``optimizer.kwargs.lr``; ``reward_funcs`` is
``train(reward_fn=[f, g])`` with ``method.reward_weights``.
"""

from __future__ import annotations

from typing import Any, Optional

import attrs

from rlkit_core.config import MethodConfig, TRLConfig, at_least, non_negative, one_of, positive

from rlkit_methods.common.defaults import number as _number
from rlkit_methods.common.defaults import trlx_default_config

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
SCALE_REWARDS = ("group", "batch", "none")


def scale_rewards_spelling(value: Any) -> Any:
    """TRL's ``scale_rewards: true`` is ``"group"``, ``false`` is ``"none"``."""
    if isinstance(value, bool):
        return "group" if value else "none"
    return value


def _finite_list(length: Optional[int] = None):
    def check(instance, attribute, value):
        if value is None:
            return
        ok = isinstance(value, (list, tuple)) and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                      and v == v and abs(v) != float("inf") for v in value)
        if not ok or (length is not None and len(value) != length) or not value:
            size = f"{length} " if length else ""
            raise ValueError(f"{attribute.name}: must be a list of {size}finite numbers, got {value!r}")

    return check


def _default_gen_kwargs() -> dict[str, Any]:
    return dict(max_new_tokens=40, top_k=0, top_p=1.0, temperature=1.0, do_sample=True)


@attrs.define
class GroupSamplingConfig(MethodConfig):
    """What GRPO and RLOO share: groups of samples per prompt, the clipped ratio, the loop.

    :param num_generations: samples per prompt (a group; never split over ranks or calls)
    :param beta: KL coefficient to the reference; 0 builds no reference and runs no reference pass
    :param num_iterations: passes over each rollout phase (TRL's mu); > 1 reuses the rollouts' log-probs as pi_old
    :param epsilon: lower clip eps_low of the ratio; :param epsilon_high: upper clip (None: epsilon)
    :param mask_truncated_completions: samples that hit max_new_tokens without EOS (or a stop
        sequence) are left out of the loss (they still count in their group's baseline)
    :param reward_weights: one weight per reward function (None: all 1)
    :param num_rollouts: samples per rollout phase on each rank (a multiple of num_generations)
    :param chunk_size: samples per generation call (a multiple of num_generations)
    :param gen_kwargs: generation kwargs; :param gen_experience_kwargs: used for rollouts if set
    :param vllm_importance_sampling_correction: weigh the policy-gradient term by the truncated
        importance ratio min(pi_old / mu, C) of the trainer's log-probs over the generator's
        (TRL 1.16's name and token_truncate mode, sequence_truncate for RLOO's sequence ratio;
        off by default here: rlkit's default generator is the trainer's own sampler)
    :param vllm_importance_sampling_clip_max: its cap C (TRL's default 3.0)
    """

    name: str = "GRPOConfig"
    num_generations: int = attrs.field(default=8, validator=at_least(2))
    beta: float = attrs.field(default=0.0, validator=_number(non_negative))
    num_iterations: int = attrs.field(default=1, validator=positive)
    epsilon: float = attrs.field(default=0.2, validator=_number(non_negative))
    epsilon_high: Optional[float] = attrs.field(default=None, validator=_number(non_negative))
    mask_truncated_completions: bool = False
    reward_weights: Optional[list[float]] = attrs.field(default=None, validator=_finite_list())
    num_rollouts: int = attrs.field(default=128, validator=positive)
    chunk_size: int = attrs.field(default=64, validator=positive)
    gen_kwargs: dict[str, Any] = attrs.field(factory=_default_gen_kwargs)
    gen_experience_kwargs: Optional[dict[str, Any]] = None
    vllm_importance_sampling_correction: bool = False
    vllm_importance_sampling_clip_max: float = attrs.field(default=3.0, validator=_number(positive))

    def __attrs_post_init__(self) -> None:
        if attrs.validators.get_disabled():
            return  # structuring: collect_errors runs this after the field checks
        for field in ("num_rollouts", "chunk_size"):
            value = getattr(self, field)
            if value % self.num_generations:
                raise ValueError(f"{field}: {value} is not a multiple of num_generations={self.num_generations}; "
                                 f"every prompt's group of samples must stay whole")

    @property
    def epsilon_low(self) -> float:
        return self.epsilon

    @property
    def upper_epsilon(self) -> float:
        return self.epsilon if self.epsilon_high is None else self.epsilon_high

    @property
    def max_completion_length(self) -> Optional[int]:
        """TRL's name for the rollouts' ``max_new_tokens``."""
        return (self.gen_experience_kwargs or self.gen_kwargs).get("max_new_tokens")


@attrs.define
class GRPOConfig(GroupSamplingConfig):
    """Group relative policy optimisation (TRL's ``GRPOConfig`` fields and defaults).

    :param loss_type: grpo (per-sample token mean), bnpo (token mean of the micro-batch),
        dr_grpo (sum / (rows * max_new_tokens)), dapo (token mean of the whole rollout phase)
    :param scale_rewards: group (or true), batch, none (or false): the std dividing the advantages
    :param use_bias_correction_kl: multiply the KL term by the importance ratio pi / pi_old
        (TRL's default since 1.x: the unbiased reverse-KL gradient; only matters with beta > 0)
    """

    name: str = "GRPOConfig"
    loss_type: str = attrs.field(default="dapo", validator=one_of(*LOSS_TYPES))
    scale_rewards: str = attrs.field(default="group", converter=scale_rewards_spelling, validator=one_of(*SCALE_REWARDS))
    use_bias_correction_kl: bool = True

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        if attrs.validators.get_disabled():
            return
        if self.loss_type == "dr_grpo" and not self.max_completion_length:
            raise ValueError("loss_type: dr_grpo divides by max_completion_length; set gen_kwargs.max_new_tokens")


@attrs.define
class RLOOConfig(GroupSamplingConfig):
    """REINFORCE leave-one-out, as TRL 1.16 has it: the KL to the reference (k1, summed over the
    sample) is subtracted from the reward, the baseline is the mean of the group's other
    rewards, and the loss clips the sequence's probability ratio.

    :param normalize_advantages: whiten the advantages over the rollout phase
    :param reward_clip_range: [low, high] clip of the (weighted) reward; None: no clipping
    """

    name: str = "RLOOConfig"
    num_generations: int = attrs.field(default=2, validator=at_least(2))
    beta: float = attrs.field(default=0.05, validator=_number(non_negative))
    normalize_advantages: bool = False
    reward_clip_range: Optional[list[float]] = attrs.field(default=None, validator=_finite_list(2))


def _default(method: MethodConfig, trainer: str) -> TRLConfig:
    return trlx_default_config(method, trainer=trainer, seq_length=1024, batch_size=32, total_steps=10000,
                               checkpoint_interval=10000, lr=1e-6)


def default_grpo_config() -> TRLConfig:
    """TRL's GRPO defaults on trlX's skeleton (model: the offline SmolLM2-135M source; TRL's lr 1e-6)."""
    return _default(GRPOConfig(), "AccelerateGRPOTrainer")


def default_rloo_config() -> TRLConfig:
    """TRL's RLOO defaults on trlX's skeleton (model: the offline SmolLM2-135M source)."""
    return _default(RLOOConfig(), "AccelerateRLOOTrainer")
