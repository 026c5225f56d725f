"""trlX's accelerate trainer names: each is a method's trainer (``rlkit_methods``) paired
with :class:`~rlkit_accelerate.engine.AccelerateEngine`, with trlX's constructor
``(config, reward_fn=None, metric_fn=None, stop_sequences=None, logit_mask=None, **kwargs)``."""

from __future__ import annotations

from rlkit_methods.grpo.trainer import GRPOTrainer, RLOOTrainer
from rlkit_methods.ilql.trainer import ILQLTrainer
from rlkit_methods.ppo.trainer import PPOTrainer
from rlkit_methods.rft.trainer import RFTTrainer
from rlkit_methods.sft.trainer import SFTTrainer

from rlkit_accelerate.engine import AccelerateEngine


class AcceleratePPOTrainer(PPOTrainer):
    engine_class = AccelerateEngine


class AccelerateILQLTrainer(ILQLTrainer):
    engine_class = AccelerateEngine


class AccelerateSFTTrainer(SFTTrainer):
    engine_class = AccelerateEngine


class AccelerateRFTTrainer(RFTTrainer):
    engine_class = AccelerateEngine


class AccelerateGRPOTrainer(GRPOTrainer):
    engine_class = AccelerateEngine


class AccelerateRLOOTrainer(RLOOTrainer):
    engine_class = AccelerateEngine
