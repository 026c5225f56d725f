"""trlX's NeMo trainer names as imports: ``from rlkit_nemo.trainers import NeMoPPOTrainer``
(``NeMoILQLTrainer``, ``NeMoSFTTrainer``, and ``NeMo<Method>Trainer`` for every installed
method; also ``from rlkit_nemo import ...``). Each is the method's trainer on
:class:`~rlkit_nemo.engine.MegatronEngine` with trlX's constructor plus the engine's
``megatron_cfg`` and ``pretrained_model``, made by :mod:`rlkit_core.pairing`. Importing one
needs neither NeMo nor megatron-core; building one without megatron-core is a one-line error
saying what to install (:func:`rlkit_nemo.config_checks.require_megatron`)."""

from rlkit_core.pairing import module_getattr

__getattr__ = module_getattr("nemo", __name__)
