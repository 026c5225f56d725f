"""``megatron_trainer(cfg)``: NeMo 2's Lightning trainer for a Megatron YAML (trlX's function,
on NeMo 2: ``nemo.lightning.Trainer`` + ``MegatronStrategy`` + ``MegatronMixedPrecision``
+ ``NeMoLogger``), and the Megatron optimizer and data sampler of the same YAML. trlX
compatibility only: the engine (:mod:`rlkit_nemo.engine`) drives megatron-core itself, and
``rlkit_nemo`` imports this module when one of these names is asked for."""

from __future__ import annotations

from typing import Any

from rlkit_core.errors import ConfigError

from rlkit_nemo.config_checks import INSTALL_HINT
from rlkit_nemo.megatron_config import MegatronCfg, translate


def require_nemo(what: str = "the NeMo backend"):
    """``nemo.lightning``, or a one-line error saying what to install."""
    try:
        import nemo.lightning as nl
    except ImportError as exc:
        raise ConfigError(f"{what} needs NeMo, which is not importable ({exc}); {INSTALL_HINT}") from None
    return nl


def _dtype(name: str | None):
    import torch

    return None if name is None else getattr(torch, name)


def megatron_trainer(cfg: MegatronCfg, *, cpu: bool = False, **overrides: Any):
    """A ``nemo.lightning.Trainer`` for a Megatron YAML path or mapping; ``overrides`` go to
    the Trainer (e.g. ``max_steps``). ``cpu=True`` for CPU runs (tests): CPU accelerator,
    no gradient clipping."""
    nl = require_nemo("megatron_trainer")
    spec = translate(cfg, cpu=cpu)
    strategy = dict(spec["strategy"])
    strategy["pipeline_dtype"] = _dtype(strategy["pipeline_dtype"])
    plugins = []
    if spec["precision"] is not None:
        p = dict(spec["precision"])
        for key in ("params_dtype", "pipeline_dtype", "autocast_dtype"):
            p[key] = _dtype(p[key])
        plugins.append(nl.MegatronMixedPrecision(**p))
    trainer = nl.Trainer(
        strategy=nl.MegatronStrategy(**strategy, ddp=_ddp_config(spec), setup_optimizers=True),
        plugins=plugins or None,
        logger=False,
        **{**spec["trainer"], **overrides},
    )
    megatron_logger(spec).setup(trainer, resume_if_exists=False)
    return trainer


def _ddp_config(spec):
    from megatron.core.distributed import DistributedDataParallelConfig

    return DistributedDataParallelConfig(
        grad_reduce_in_fp32=True, overlap_grad_reduce=False,
        use_distributed_optimizer=spec["optimizer"]["use_distributed_optimizer"],
    )


def megatron_logger(spec: dict):
    """``NeMoLogger`` of the ``exp_manager`` section: log dir, TensorBoard, W&B."""
    nl = require_nemo()
    log = spec["logger"]
    kwargs: dict[str, Any] = dict(name=log["name"], explicit_log_dir=log["explicit_log_dir"], log_dir=log["log_dir"])
    if log["wandb"]:
        from lightning.pytorch.loggers import WandbLogger

        kwargs["wandb"] = WandbLogger(**{"name": log["name"], **log["wandb_kwargs"]})
    return nl.NeMoLogger(**kwargs)


def megatron_optimizer(cfg: MegatronCfg, *, cpu: bool = False):
    """``MegatronOptimizerModule`` (megatron-core ``OptimizerConfig`` + NeMo scheduler) of ``model.optim``."""
    nl = require_nemo("megatron_optimizer")
    from megatron.core.optimizer import OptimizerConfig
    from nemo.lightning.pytorch.optim import CosineAnnealingScheduler, WarmupAnnealingScheduler

    spec = translate(cfg, cpu=cpu)
    opt = dict(spec["optimizer"])
    opt["params_dtype"] = _dtype(opt["params_dtype"])
    scheduler = None
    if spec["scheduler"] is not None:
        s = dict(spec["scheduler"])
        if s.pop("name") == "CosineAnnealing":
            scheduler = CosineAnnealingScheduler(**s)
        else:
            s.pop("constant_steps")
            scheduler = WarmupAnnealingScheduler(**s)
    return nl.MegatronOptimizerModule(config=OptimizerConfig(**opt), lr_scheduler=scheduler)


def megatron_data_sampler(cfg: MegatronCfg):
    """``MegatronDataSampler`` for the YAML's micro/global batch and sequence length."""
    nl = require_nemo("megatron_data_sampler")
    return nl.MegatronDataSampler(**translate(cfg)["data"])
