"""trlX's NeMo trainer names: each is a method's trainer (``rlkit_methods``) paired with
:class:`~rlkit_nemo.engine.MegatronEngine`, with trlX's constructor (``megatron_cfg``,
``pretrained_model``; ILQL also ``train_mode``). Importing this module needs neither NeMo nor
megatron-core; building a trainer without them is a one-line error saying what to install."""

from __future__ import annotations

from rlkit_methods.grpo.trainer import GRPOTrainer, RLOOTrainer
from rlkit_methods.ilql.trainer import ILQLTrainer
from rlkit_methods.ppo.trainer import PPOTrainer
from rlkit_methods.rft.trainer import RFTTrainer
from rlkit_methods.sft.trainer import SFTTrainer

from rlkit_nemo.engine import MegatronEngine
from rlkit_nemo.lightning import require_megatron


class _NeMoPairing:
    engine_class = MegatronEngine

    def _start(self, config, megatron_cfg, pretrained_model, kwargs) -> dict:
        require_megatron(f"train.trainer: {type(self).__name__}")  # before anything else is built
        return dict(kwargs, megatron_cfg=megatron_cfg, pretrained_model=pretrained_model)


class NeMoPPOTrainer(_NeMoPairing, PPOTrainer):
    def __init__(self, config, metric_fn=None, megatron_cfg=None, pretrained_model=None, **kwargs):
        kwargs = self._start(config, megatron_cfg, pretrained_model, kwargs)
        super().__init__(config, metric_fn=metric_fn, **kwargs)  # reward_fn, stop_sequences: keywords, as in trlX


class NeMoILQLTrainer(_NeMoPairing, ILQLTrainer):
    def __init__(self, config, reward_fn=None, logit_mask=None, metric_fn=None, stop_sequences=None, train_mode=True,
                 megatron_cfg=None, pretrained_model=None, **kwargs):
        kwargs = self._start(config, megatron_cfg, pretrained_model, kwargs)
        self.train_mode = train_mode  # trlX's flag; the shared loop trains whenever learn() is called
        super().__init__(config, reward_fn=reward_fn, metric_fn=metric_fn, stop_sequences=stop_sequences,
                         logit_mask=logit_mask, **kwargs)


class NeMoSFTTrainer(_NeMoPairing, SFTTrainer):
    def __init__(self, config, reward_fn=None, metric_fn=None, stop_sequences=None, megatron_cfg=None,
                 pretrained_model=None, **kwargs):
        kwargs = self._start(config, megatron_cfg, pretrained_model, kwargs)
        super().__init__(config, reward_fn=reward_fn, metric_fn=metric_fn, stop_sequences=stop_sequences, **kwargs)


class NeMoGRPOTrainer(_NeMoPairing, GRPOTrainer):
    def __init__(self, config, reward_fn=None, metric_fn=None, megatron_cfg=None, pretrained_model=None, **kwargs):
        kwargs = self._start(config, megatron_cfg, pretrained_model, kwargs)
        super().__init__(config, reward_fn=reward_fn, metric_fn=metric_fn, **kwargs)


class NeMoRLOOTrainer(_NeMoPairing, RLOOTrainer):
    def __init__(self, config, reward_fn=None, metric_fn=None, megatron_cfg=None, pretrained_model=None, **kwargs):
        kwargs = self._start(config, megatron_cfg, pretrained_model, kwargs)
        super().__init__(config, reward_fn=reward_fn, metric_fn=metric_fn, **kwargs)


class NeMoRFTTrainer(_NeMoPairing, RFTTrainer):
    def __init__(self, config, reward_fn=None, metric_fn=None, megatron_cfg=None, pretrained_model=None, **kwargs):
        kwargs = self._start(config, megatron_cfg, pretrained_model, kwargs)
        super().__init__(config, reward_fn=reward_fn, metric_fn=metric_fn, **kwargs)
