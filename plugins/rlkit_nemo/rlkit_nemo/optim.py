"""The optimizer and learning-rate schedule on Megatron's (distributed) optimizer.

Where they come from follows trlX's NeMo trainers (:func:`yaml_rules`): NeMoILQLTrainer and
NeMoSFTTrainer ran NeMo's own optimizer set-up on the Megatron YAML, so for ILQL and SFT the
YAML's ``model.optim`` (``lr``, ``betas``, ``eps``, ``weight_decay``; ``adam`` couples weight
decay, ``fused_adam`` / ``distributed_fused_adam`` are AdamW as in NeMo) and ``optim.sched``
set them; NeMoPPOTrainer wrote the rlkit config's ``optimizer`` and ``scheduler`` into the
YAML, so PPO and every method trlX had no NeMo trainer for take the rlkit config's.

The rate follows NeMo's ``CosineAnnealing`` (:func:`cosine_annealing_lr`, from the YAML's
``sched`` or ``scheduler.name: CosineAnnealing``) or one of trlX's torch schedulers. Either
runs on a one-parameter *shadow* optimizer whose rate is copied into Megatron's parameter
groups after every step, so its state is torch's own ``state_dict``. Megatron's precision
settings (bf16/fp16 weights with fp32 main copies, fp16's dynamic loss scale, the
distributed optimizer) stay the Megatron YAML's.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from rlkit_core.errors import ConfigError
from rlkit_methods.engine_kit import get_scheduler_class

LOSS_SCALE = ("initial_loss_scale", "loss_scale_window", "hysteresis")  # fp16's dynamic scale, the YAML's
OPTIMIZERS = {"adam": ("adam", False), "adamw": ("adam", True), "sgd": ("sgd", False)}
YAML_RULED = ("ilqlconfig", "sftconfig")  # trlX ran these through NeMo's Lightning fit on the YAML
COSINE = "CosineAnnealing"  # NeMo's name, the one schedule the engine runs from a YAML
COSINE_KEYS = ("warmup_steps", "warmup_ratio", "constant_steps", "constant_ratio", "min_lr", "max_steps")


def yaml_rules(config) -> bool:
    """Whether the Megatron YAML's ``optim``, ``sched`` and ``trainer.max_steps`` rule the run
    (ILQL and SFT, as in trlX) rather than the rlkit config's optimizer, scheduler and steps."""
    return str(getattr(config.method, "name", "")).lower() in YAML_RULED


def optimizer_config(config, yaml_optimizer: dict[str, Any]):
    """megatron-core ``OptimizerConfig`` of ``config.optimizer``, or of the YAML's ``optim``
    where it rules (:func:`yaml_rules`); clipping is the engine's."""
    from megatron.core.optimizer import OptimizerConfig

    common = dict(
        clip_grad=0.0,  # clipped in optimizer_step (Megatron's clip asserts CUDA tensors)
        bf16=yaml_optimizer["params_dtype"] == "bfloat16", fp16=yaml_optimizer["params_dtype"] == "float16",
        params_dtype=getattr(torch, yaml_optimizer["params_dtype"]),
        use_distributed_optimizer=yaml_optimizer["use_distributed_optimizer"],
        **{k: yaml_optimizer[k] for k in LOSS_SCALE if k in yaml_optimizer},
    )
    if yaml_rules(config):
        keys = ("optimizer", "lr", "weight_decay", "adam_beta1", "adam_beta2", "adam_eps", "decoupled_weight_decay",
                "sgd_momentum")
        return OptimizerConfig(**{k: yaml_optimizer[k] for k in keys}, **common)
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
    return OptimizerConfig(**fields, **common)


def cosine_annealing_lr(step: int, *, base_lr: float, max_steps: int, warmup_steps: int = 0,
                        constant_steps: int = 0, min_lr: float = 0.0) -> float:
    """NeMo's ``CosineAnnealing`` (``nemo.core.optim.lr_scheduler``, trlX's NeMo 1 and NeMo 2
    alike) at optimizer step ``step`` (0 is the first update). Without ``constant_steps``: a
    warmup of ``base_lr (step + 1) / (warmup + 1)``, then ``min_lr + (base_lr - min_lr)
    (1 + cos(pi (step - warmup) / (max_steps - warmup))) / 2``. With them, Megatron's form: a
    warmup of ``base_lr step / warmup``, the cosine over ``decay = max_steps - warmup -
    constant`` steps, then ``min_lr`` held for the ``constant_steps`` (the hold is at the end).
    ``min_lr`` after ``max_steps``. trlX's YAMLs set constant_steps above max_steps: the decay
    is then negative and the rate is ``min_lr`` from the first step after the warmup."""
    decay = max_steps - (constant_steps + warmup_steps)

    def megatron_form(step):  # NeMo's _linear_warmup_with_cosine_annealing
        if warmup_steps > 0 and step <= warmup_steps:
            return base_lr * step / warmup_steps
        if step > warmup_steps + decay:
            return min_lr
        return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * (step - warmup_steps) / decay))

    if warmup_steps > 0 and step <= warmup_steps:
        return megatron_form(step) if constant_steps > 0 else base_lr * (step + 1) / (warmup_steps + 1)
    if constant_steps > 0 and warmup_steps + decay < step <= max_steps:
        return megatron_form(step)  # the hold at min_lr
    if step > max_steps:
        return min_lr
    if constant_steps > 0:
        return megatron_form(step)
    progress = (step - warmup_steps) / (max_steps - warmup_steps)
    return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


class CosineAnnealing(torch.optim.lr_scheduler.LRScheduler):
    """:func:`cosine_annealing_lr` as a torch scheduler (its ``state_dict`` is plain numbers)."""

    def __init__(self, optimizer, *, max_steps: int, warmup_steps: int = 0, constant_steps: int = 0,
                 min_lr: float = 0.0):
        self.max_steps, self.warmup_steps, self.constant_steps, self.min_lr = max_steps, warmup_steps, constant_steps, min_lr
        super().__init__(optimizer)

    def get_lr(self) -> list[float]:
        return [cosine_annealing_lr(self.last_epoch, base_lr=base, max_steps=self.max_steps, warmup_steps=self.warmup_steps,
                                    constant_steps=self.constant_steps, min_lr=self.min_lr) for base in self.base_lrs]


def cosine_settings(kwargs: dict[str, Any], *, lr: float, horizon: int, where: str) -> dict[str, Any]:
    """:class:`CosineAnnealing`'s arguments from NeMo's sched keys (``warmup_steps`` or
    ``warmup_ratio``, ``constant_steps`` or ``constant_ratio``, ``min_lr``, ``max_steps``:
    ``horizon`` when absent or not positive), checked as NeMo checks them, in one line."""
    unknown = sorted(set(kwargs) - set(COSINE_KEYS) - {"name"})
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: not a key of NeMo's CosineAnnealing; it takes {', '.join(COSINE_KEYS)}")
    max_steps = int(kwargs.get("max_steps") or -1)
    max_steps = max_steps if max_steps > 0 else int(horizon)

    def steps(key: str) -> int:  # NeMo's <key>_steps, else <key>_ratio x max_steps
        given = kwargs.get(f"{key}_steps")
        return int(float(given)) if given is not None else int(float(kwargs.get(f"{key}_ratio") or 0) * max_steps)

    warmup, constant = steps("warmup"), steps("constant")
    min_lr = float(kwargs.get("min_lr", 0.0))
    if min_lr > lr or (constant > 0 and min_lr == lr):
        raise ConfigError(f"{where}.min_lr: {min_lr:g} is not below the learning rate {lr:g}; NeMo's CosineAnnealing "
                          f"{'needs it strictly below' if constant > 0 else 'refuses a larger one'} (trlX's examples "
                          f"used lr 6.001e-5 with min_lr 6e-5)")
    if constant == 0 and max_steps <= warmup:
        raise ConfigError(f"{where}.max_steps: {max_steps} is not above warmup_steps ({warmup}); the cosine has no steps")
    return dict(max_steps=max_steps, warmup_steps=warmup, constant_steps=constant, min_lr=min_lr)


def schedule_settings(config, megatron: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """(peak learning rate, :class:`CosineAnnealing`'s arguments or None for the rlkit config's
    torch scheduler). The YAML's ``sched`` where the YAML rules (:func:`yaml_rules`; none: a
    constant rate, as NeMo ran it; its horizon ``sched.max_steps``, else ``trainer.max_steps``,
    else ``train.total_steps``), else ``scheduler.name: CosineAnnealing`` (trlX's NeMo PPO
    examples name it so; horizon ``scheduler.kwargs.max_steps``, else ``train.total_steps``,
    as trlX's NeMoPPOTrainer replaced the YAML's ``trainer.max_steps`` by the run's length)."""
    sched = megatron.get("scheduler")
    if sched is not None and sched["name"] != COSINE:
        raise ConfigError(f"megatron_cfg.model.optim.sched.name: {sched['name']!r} is not run by the NeMo engine; it runs "
                          f"{COSINE} (or null: a constant rate)")
    total = int(config.train.total_steps)
    if yaml_rules(config):
        lr = float(megatron["optimizer"]["lr"])
        if sched is None:
            return lr, dict(max_steps=total, warmup_steps=0, constant_steps=0, min_lr=lr)  # constant
        raw = {k: sched[k] for k in ("warmup_steps", "constant_steps", "min_lr", "max_steps")}
        return lr, cosine_settings(raw, lr=lr, horizon=total, where="megatron_cfg.model.optim.sched")
    lr = float(config.optimizer.kwargs.get("lr", 1e-3))
    if str(config.scheduler.name).lower() != COSINE.lower():
        return lr, None
    return lr, cosine_settings(dict(config.scheduler.kwargs), lr=lr, horizon=total, where="scheduler.kwargs")


class LRSchedule:
    """The schedule of :func:`schedule_settings` stepped on a shadow optimizer; ``apply``
    copies its rate to Megatron's parameter groups."""

    def __init__(self, config, megatron_optimizer, megatron: dict[str, Any]):
        self.optimizer = megatron_optimizer
        lr, cosine = schedule_settings(config, megatron)
        self.shadow = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)
        if cosine is not None:
            self.scheduler = CosineAnnealing(self.shadow, **cosine)
            self.apply()
            return
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
