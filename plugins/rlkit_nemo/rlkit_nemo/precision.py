"""Half-precision training as Megatron does it (NeMo 1's ``megatron_amp_O2``).

Under O2 the TransformerConfig says ``bf16`` or ``fp16`` and the model is wrapped in
megatron-core's ``Float16Module``: every weight of the module, norms and embeddings included,
is cast to the half dtype (as Megatron's GPT is under its training loop), float inputs of the
first stage are cast down and the last stage's outputs come back in fp32. The optimizer is
megatron-core's mixed-precision one (``OptimizerConfig.bf16`` / ``fp16``): fp32 main copies of
the weights, gradients reduced in fp32, and for fp16 a dynamic loss scale, which Megatron's
schedule applies to the loss through ``config.grad_scale_func`` (:func:`scale_losses`).

Modules marked ``keeps_fp32`` (ILQL's target Q heads: a Polyak average at alpha 0.001 moves
by less than bf16 can represent) are cast back to fp32 and hold no optimizer state.
"""

from __future__ import annotations

import torch


def half_dtype(config) -> torch.dtype | None:
    """The half dtype a TransformerConfig trains its weights in (O2), or None (fp32 weights)."""
    return torch.bfloat16 if config.bf16 else torch.float16 if config.fp16 else None


def wrap(module: torch.nn.Module) -> torch.nn.Module:
    """``module`` in megatron-core's ``Float16Module`` when its config asks for half-precision
    weights, else ``module`` itself. Parameters keep their identity (cast in place), so a
    reference sharing the policy's frozen blocks still shares them."""
    from megatron.core.transformer.module import Float16Module

    if half_dtype(module.config) is None:
        return module
    wrapped = Float16Module(module.config, module)
    for sub in module.modules():
        if getattr(sub, "keeps_fp32", False):
            sub.float()
    return wrapped


def scale_losses(config, optimizer) -> None:
    """Megatron's schedule multiplies each micro-batch's loss by ``grad_scale_func`` before its
    backward; the optimizer divides the gradients by the same scale (and skips a step whose
    gradients overflowed). Without it an fp16 run's gradients are divided by a scale that never
    multiplied them."""
    config.grad_scale_func = optimizer.scale_loss
