"""trlX's import path of its accelerate trainers: ``from rlkit_accelerate.trainers import
AcceleratePPOTrainer`` (``AccelerateILQLTrainer``, ``AccelerateSFTTrainer``, and
``Accelerate<Method>Trainer`` for every installed method). Each is the method's trainer on
:class:`~rlkit_accelerate.engine.AccelerateEngine` with trlX's constructor, made by
:mod:`rlkit_core.pairing`; this module only resolves the names, through the plugin registry."""

from rlkit_core.pairing import module_getattr

__getattr__ = module_getattr("accelerate", __name__)
