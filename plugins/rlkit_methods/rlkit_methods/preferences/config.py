"""``DPOConfig`` and ``RewardModelConfig``: TRL's ``DPOConfig`` / ``RewardConfig`` field names
and defaults where the concepts match, trlX's for the loop (torch-free module).

TRL -> rlkit: ``max_length`` is ``train.seq_length`` (a pair's completion keeps its start, the
prompt its end), ``per_device_train_batch_size * gradient_accumulation_steps`` is
``train.batch_size`` (pairs per optimizer step) with micro-batches of ``train.minibatch_size``,
``learning_rate`` is ``optimizer.kwargs.lr``; the reward model's ``margin`` is a column of the
pairs, as in TRL.
"""

from __future__ import annotations

from typing import Any, Optional

import attrs

from rlkit_core.config import MethodConfig, TRLConfig, in_closed_interval, non_negative, one_of, positive

from rlkit_methods.common.defaults import number, trlx_default_config

DPO_LOSS_TYPES = ("sigmoid", "ipo", "hinge")  # as rlkit_methods.preferences.losses (which imports torch)


def _gen_kwargs() -> dict[str, Any]:
    return dict(max_new_tokens=40, top_k=0, top_p=1.0, do_sample=True)


@attrs.define
class DPOConfig(MethodConfig):
    """Direct preference optimisation (TRL's ``DPOConfig`` fields and defaults).

    :param beta: the strength of the implicit KL to the reference (IPO's tau)
    :param loss_type: sigmoid (DPO), ipo (log-probs averaged per token), hinge (SLiC)
    :param label_smoothing: the probability that a pair's label is flipped (sigmoid only: cDPO)
    :param precompute_ref_log_probs: compute the reference log-probs of every pair once, with the
        initial weights, before the first step (no reference model at all). When false, the
        engine's reference is used where it costs no second model (a hydra branch for
        ``model.num_layers_unfrozen >= 0``, the adapters switched off with
        ``model.peft_config``); otherwise the log-probs are precomputed anyway
    :param disable_dropout: train without dropout (TRL's default), so the policy's log-probs
        are compared with the reference's on the same footing
    :param gen_kwargs: generation kwargs used at evaluation
    """

    name: str = "DPOConfig"
    beta: float = attrs.field(default=0.1, validator=number(positive))
    loss_type: str = attrs.field(default="sigmoid", validator=one_of(*DPO_LOSS_TYPES))
    label_smoothing: float = attrs.field(default=0.0, validator=number(in_closed_interval(0.0, 0.5)))
    precompute_ref_log_probs: bool = False
    disable_dropout: bool = True
    gen_kwargs: dict[str, Any] = attrs.field(factory=_gen_kwargs)

    def __attrs_post_init__(self) -> None:
        if attrs.validators.get_disabled():
            return
        if self.label_smoothing and self.loss_type != "sigmoid":
            raise ValueError(f"label_smoothing: only the sigmoid loss smooths labels; set it to 0 for {self.loss_type}")


@attrs.define
class RewardModelConfig(MethodConfig):
    """A reward model trained on preference pairs (TRL's ``RewardConfig``): a scalar head on the
    LM's last hidden state, the Bradley-Terry loss, exported as a plain HF
    ``AutoModelForSequenceClassification`` folder.

    :param center_rewards_coefficient: weight of mean((r_c + r_r)^2), which centres the rewards (None: off)
    :param eval_fraction: the share of pairs held out for evaluation (pairwise accuracy; chance is 0.5)
    :param disable_dropout: train without dropout (TRL's default)
    :param gen_kwargs: kept for the loop's interface; a reward model is evaluated on held-out pairs
    """

    name: str = "RewardModelConfig"
    center_rewards_coefficient: Optional[float] = attrs.field(default=None, validator=number(non_negative))
    eval_fraction: float = attrs.field(default=0.1, validator=number(in_closed_interval(0.0, 0.9)))
    disable_dropout: bool = True
    gen_kwargs: dict[str, Any] = attrs.field(factory=lambda: dict(max_new_tokens=1, do_sample=False))


def default_dpo_config() -> TRLConfig:
    """TRL's DPO defaults on trlX's skeleton (model: the offline SmolLM2-135M source; lr 1e-6)."""
    return trlx_default_config(DPOConfig(), trainer="AccelerateDPOTrainer", seq_length=1024, batch_size=8,
                               total_steps=10000, checkpoint_interval=10000, lr=1e-6)


def default_reward_model_config() -> TRLConfig:
    """TRL's reward-model defaults on trlX's skeleton (lr 1e-5)."""
    return trlx_default_config(RewardModelConfig(), trainer="AccelerateRewardModelTrainer", seq_length=1024,
                               batch_size=8, total_steps=10000, checkpoint_interval=10000, lr=1e-5)
