"""The config's optimizer and scheduler on Megatron's distributed optimizer.

``optimizer.name`` adam / adamw / sgd and its kwargs (``lr``, ``betas``, ``eps``,
``weight_decay``, ``momentum``) become megatron-core's ``OptimizerConfig`` (adam: weight decay
added to the gradient as torch's Adam does; adamw: decoupled). The learning rate follows
``scheduler.name`` with trlX's torch schedulers, run on a one-parameter *shadow* optimizer
whose rate is copied into Megatron's parameter groups after every step, so every scheduler
torch has (cosine annealing, linear, constant...) works unchanged and its state is torch's
own ``state_dict``. Megatron's precision settings (bf16/fp16 weights with fp32 main copies,
fp16's dynamic loss scale, the distributed optimizer) stay the Megatron YAML's.
"""

from __future__ import annotations

from typing import Any

import torch

from rlkit_core.errors import ConfigError
from rlkit_methods.engine_kit import get_scheduler_class

LOSS_SCALE = ("initial_loss_scale", "loss_scale_window", "hysteresis")  # fp16's dynamic scale, the YAML's
OPTIMIZERS = {"adam": ("adam", False), "adamw": ("adam", True), "sgd": ("sgd", False)}


def optimizer_config(config, yaml_optimizer: dict[str, Any]):
    """megatron-core ``OptimizerConfig`` of ``config.optimizer`` (clipping is the engine's)."""
    from megatron.core.optimizer import OptimizerConfig

    name = str(config.optimizer.name).lower()
    if name not in OPTIMIZERS:
        raise ConfigError(f"optimizer.name: {name!r} has no Megatron optimizer; the NeMo engine takes {', '.join(OPTIMIZERS)}")
    kwargs = dict(config.optimizer.kwargs)
    megatron_name, decoupled = OPTIMIZERS[name]
    betas = kwargs.pop("betas", (0.9, 0.999))
    fields = dict(
        optimizer=megatron_name, lr=float(kwargs.pop("lr", 1e-3)), weight_decay=float(kwargs.pop("weight_decay", 0.0)),
        adam_beta1=float(betas[0]), adam_beta2=float(betas[1]), adam_eps=float(kwargs.pop("eps", 1e-8)),
        sgd_momentum=float(kwargs.pop("momentum", 0.0)), decoupled_weight_decay=decoupled,
    )
    kwargs.pop("fused", None)  # accelerate's switch; Megatron picks its own kernels
    if kwargs:
        raise ConfigError(f"optimizer.kwargs.{sorted(kwargs)[0]}: not an option of the NeMo engine's {name}; "
                          f"it takes lr, betas, eps, weight_decay (sgd: momentum)")
    return OptimizerConfig(
        **fields, clip_grad=0.0,  # clipped in optimizer_step (Megatron's clip asserts CUDA tensors)
        bf16=yaml_optimizer["params_dtype"] == "bfloat16", fp16=yaml_optimizer["params_dtype"] == "float16",
        params_dtype=getattr(torch, yaml_optimizer["params_dtype"]),
        use_distributed_optimizer=yaml_optimizer["use_distributed_optimizer"],
        **{k: yaml_optimizer[k] for k in LOSS_SCALE if k in yaml_optimizer},
    )


class LRSchedule:
    """``scheduler.name`` stepped on a shadow optimizer; ``apply`` copies its rate to Megatron's."""

    def __init__(self, config, megatron_optimizer):
        self.optimizer = megatron_optimizer
        self.shadow = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=float(config.optimizer.kwargs.get("lr", 1e-3)))
        try:
            scheduler_class = get_scheduler_class(config.scheduler.name)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        try:
            self.scheduler = scheduler_class(self.shadow, **config.scheduler.kwargs)
        except TypeError as exc:
            raise ConfigError(f"scheduler.kwargs: {exc}") from None
        self.apply()

    def apply(self) -> None:
        lr = self.shadow.param_groups[0]["lr"]
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def step(self) -> None:
        self.shadow.step()  # no gradients: only keeps torch's order check quiet
        self.scheduler.step()
        self.apply()

    def get_last_lr(self) -> list[float]:
        return [group["lr"] for group in self.optimizer.param_groups][:1]

    def state_dict(self) -> dict[str, Any]:
        return self.scheduler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state)
        self.shadow.param_groups[0]["lr"] = self.scheduler.get_last_lr()[0]
        self.apply()


@torch.no_grad()
def optimizer_step(optimizer, max_grad_norm: float | None) -> tuple[bool, float]:
    """Megatron's ``step`` with rlkit's clipping: main grads ready, the global norm over
    model-parallel ranks, clip to ``max_grad_norm``, step. Returns (stepped, grad norm)."""
    if optimizer.prepare_grads():  # an fp16 overflow: skip this step (Megatron's rule)
        return False, float("nan")
    norm = float(optimizer.get_grad_norm())
    if max_grad_norm and norm > max_grad_norm:
        coeff = max_grad_norm / (norm + 1e-6)
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.mul_(coeff)
    stepped = optimizer.step_with_ready_grads()
    return bool(stepped), norm
