"""trlX's Megatron YAML (``trainer``, ``model``, ``exp_manager``; trlX's ``configs/nemo_configs``)
translated into the arguments of NeMo 2's Lightning trainer. Pure Python: no NeMo import,
so the translation and its errors are checked before anything heavy loads.

What maps where (NeMo 1 key -> NeMo 2 object):

* ``model.tensor/pipeline_model_parallel_size``, ``sequence_parallel`` -> ``MegatronStrategy``
* ``trainer.precision`` + ``model.megatron_amp_O2`` -> ``MegatronMixedPrecision``: O2 keeps
  the weights in half precision (fp32 master copies in the optimizer), otherwise fp32 weights
  under autocast
* ``model.optim`` (+ ``trainer.gradient_clip_val``) -> megatron-core ``OptimizerConfig``,
  ``model.optim.sched`` -> a NeMo LR scheduler
* ``model.micro/global_batch_size``, ``encoder_seq_length`` -> ``MegatronDataSampler``
* ``model.activations_checkpoint_*`` -> the TransformerConfig's ``recompute_*``
* ``exp_manager`` -> ``NeMoLogger`` (log dir, name, TensorBoard/W&B)
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any, Mapping, Union

from rlkit_core.errors import ConfigError

from rlkit_nemo.model_keys import normalize_model, te_usable
from rlkit_nemo.parallel import check_parallel_sizes

MegatronCfg = Union[str, os.PathLike, Mapping[str, Any]]

PRECISIONS = {  # trainer.precision -> (NeMo 2 precision, half dtype name or None)
    "32": ("32", None), "32-true": ("32", None),
    "16": ("16-mixed", "float16"), "16-mixed": ("16-mixed", "float16"),
    "bf16": ("bf16-mixed", "bfloat16"), "bf16-mixed": ("bf16-mixed", "bfloat16"),
}
OPTIMIZERS = {"adam": "adam", "adamw": "adam", "fused_adam": "adam", "distributed_fused_adam": "adam", "sgd": "sgd"}
SCHEDULERS = ("CosineAnnealing", "WarmupAnnealing", None)  # None: a constant learning rate
RECOMPUTE_GRANULARITY = (None, "selective", "full")
RECOMPUTE_METHOD = (None, "uniform", "block")
REQUIRED_MODEL_KEYS = ("num_layers", "hidden_size", "num_attention_heads", "encoder_seq_length")


CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")
# OmegaConf resolvers NeMo registers (nemo.core.config.hydra_runner), used by trlX's YAMLs:
# ffn_hidden_size: ${multiply:4, ${.hidden_size}}, model_parallel_size: ${multiply:TP, PP}
RESOLVERS = {"multiply": lambda x, y: x * y, "sum": lambda x, y: x + y}
EXPONENT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")
log = logging.getLogger(__name__)
_WARNED: set[str] = set()


def shipped_configs() -> list[str]:
    return sorted(n for n in os.listdir(CONFIGS) if n.endswith(".yaml"))


def find_megatron_yaml(name: str | os.PathLike) -> str:
    """A path as given when it exists, else a bare name (``megatron_20b.yaml``, or without
    ``.yaml``) among the shipped configs, as trlX looked it up in its ``configs/nemo_configs``."""
    path = os.fspath(name)
    if os.path.isfile(path):
        return path
    bare = os.path.basename(path) == path
    for candidate in (path, path + ".yaml") if bare else ():
        if os.path.isfile(os.path.join(CONFIGS, candidate)):
            return os.path.join(CONFIGS, candidate)
    raise ConfigError(f"megatron_cfg: {path}: Megatron YAML not found; pass the path of a Megatron config or "
                      f"the name of a shipped one ({', '.join(shipped_configs())} in {CONFIGS})")


def _omegaconf():
    try:
        from omegaconf import OmegaConf
    except ImportError:
        return None
    for name, fn in RESOLVERS.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
    return OmegaConf


def _has_interpolation(value: Any) -> bool:
    if isinstance(value, str):
        return "${" in value
    if isinstance(value, Mapping):
        return any(_has_interpolation(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_interpolation(v) for v in value)
    return False


def _resolve(data: Any, where: str) -> dict[str, Any]:
    """A mapping or an OmegaConf config with its ``${...}`` interpolations resolved."""
    omegaconf = _omegaconf()
    if omegaconf is None:
        if _has_interpolation(data):
            raise ConfigError(f"{where}: has ${{...}} interpolations, which need omegaconf; "
                              f"install rlkit-nemo[nemo] (or pip install omegaconf)")
        return dict(data)
    from omegaconf.errors import OmegaConfBaseException

    try:
        cfg = data if hasattr(data, "_content") else omegaconf.create(dict(data))
        return omegaconf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or "?"
        first = str(exc).strip().splitlines()[0]
        raise ConfigError(f"{where}.{key}: cannot resolve ({first})") from None


def _exponent_floats(value: Any) -> Any:
    """YAML 1.1 (PyYAML) reads ``1e-5`` as a string; NeMo's loader (OmegaConf's) as a float."""
    if isinstance(value, str) and EXPONENT.match(value):
        return float(value)
    if isinstance(value, dict):
        return {k: _exponent_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_exponent_floats(v) for v in value]
    return value


def load_megatron_cfg(cfg: MegatronCfg) -> dict[str, Any]:
    """A Megatron YAML path, a shipped config's name, or an already loaded mapping (a dict or an
    OmegaConf DictConfig, as trlX passed it), with its interpolations resolved."""
    if isinstance(cfg, (str, os.PathLike)):
        from rlkit_core.config import read_yaml

        path = find_megatron_yaml(cfg)
        data = read_yaml(path)  # one-line errors for broken YAML
        omegaconf = _omegaconf()
        if omegaconf is not None:  # its YAML loader reads 1e-5 as a number, as NeMo did
            data = omegaconf.load(path)
        return _exponent_floats(_resolve(data, f"megatron_cfg ({path})"))
    if not (isinstance(cfg, Mapping) or hasattr(cfg, "_content")):
        raise ConfigError(f"megatron_cfg: expected a YAML path or a mapping, got {type(cfg).__name__}")
    return _exponent_floats(_resolve(cfg, "megatron_cfg"))


def _one_of(value, allowed, where):
    if value not in allowed:
        raise ConfigError(f"{where}: {value!r} is not one of {', '.join(repr(a) for a in allowed)}")
    return value


def check_engine_kwargs(kwargs: Mapping[str, Any]) -> None:
    """What the NeMo engine takes from ``train.trainer_kwargs`` (trlX's NeMo trainers' arguments):
    ``megatron_cfg``, required, and ``pretrained_model``; a one-line ConfigError otherwise."""
    unknown = sorted(set(kwargs) - {"megatron_cfg", "pretrained_model"})
    if unknown:
        raise ConfigError(f"train.trainer_kwargs.{unknown[0]}: not an argument of the NeMo engine; "
                          f"it takes megatron_cfg and pretrained_model")
    if kwargs.get("megatron_cfg") is None:
        raise ConfigError(f"train.trainer_kwargs.megatron_cfg: missing; the NeMo engine needs a Megatron YAML "
                          f"(examples: {', '.join(shipped_configs())} in {CONFIGS})")


def translate(cfg: MegatronCfg, *, cpu: bool = False, te: bool | None = None, quiet: bool = False) -> dict[str, Any]:
    """The keyword arguments of each NeMo 2 object, by name: ``strategy``, ``precision``
    (None for fp32), ``trainer``, ``optimizer``, ``scheduler``, ``data``, ``logger``, and
    ``model`` (the model section in rlkit's keys, :mod:`rlkit_nemo.model_keys`, for
    :func:`rlkit_nemo.models.from_yaml.transformer_config`); ``warnings``: the settings turned off
    here, one line each (also logged). ``te``: whether Transformer Engine is usable (default:
    installed and not ``cpu``). On CPU, gradient clipping is off (megatron-core's clip asserts
    CUDA tensors). ``quiet``: return the warnings without logging them (a check, not a run)."""
    raw = load_megatron_cfg(cfg)
    unknown = sorted(set(raw) - {"name", "trainer", "model", "exp_manager", "restore_from_path"})
    if unknown:
        raise ConfigError(f"megatron_cfg.{unknown[0]}: unknown section; a Megatron YAML has trainer, model, exp_manager")
    trainer, model, exp = dict(raw.get("trainer") or {}), dict(raw.get("model") or {}), dict(raw.get("exp_manager") or {})
    missing = [k for k in REQUIRED_MODEL_KEYS if k not in model]
    if missing:
        raise ConfigError(f"megatron_cfg.model.{missing[0]}: missing; the model section needs {', '.join(REQUIRED_MODEL_KEYS)}")

    tp, pp = int(model.get("tensor_model_parallel_size", 1)), int(model.get("pipeline_model_parallel_size", 1))
    devices, nodes = trainer.get("devices", 1), int(trainer.get("num_nodes", 1))
    world = (devices if isinstance(devices, int) and devices > 0 else tp * pp) * nodes
    dp = check_parallel_sizes(
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, world_size=world,
        num_attention_heads=int(model["num_attention_heads"]), num_layers=int(model["num_layers"]),
        where="megatron_cfg.model",
    )
    mbs, gbs = int(model.get("micro_batch_size", 1)), int(model.get("global_batch_size", model.get("micro_batch_size", 1) * dp))
    if gbs % (mbs * dp):
        raise ConfigError(
            f"megatron_cfg.model.global_batch_size={gbs} is not a multiple of micro_batch_size x data-parallel size "
            f"= {mbs} x {dp}; choose a global batch that is"
        )

    precision, half = PRECISIONS.get(str(trainer.get("precision", 32)), (None, None))
    if precision is None:
        raise ConfigError(f"megatron_cfg.trainer.precision: {trainer.get('precision')!r} is not one of 32, 16, bf16 (or 16-mixed, bf16-mixed)")
    o2 = bool(model.get("megatron_amp_O2", False)) and half is not None
    params_dtype = half if o2 else "float32"
    _one_of(model.get("activations_checkpoint_granularity"), RECOMPUTE_GRANULARITY, "megatron_cfg.model.activations_checkpoint_granularity")
    _one_of(model.get("activations_checkpoint_method"), RECOMPUTE_METHOD, "megatron_cfg.model.activations_checkpoint_method")
    model, warnings = normalize_model(model, tp=tp, te=te_usable(cpu) if te is None else te)
    for line in [] if quiet else warnings:
        if line not in _WARNED:  # once per process, however often a YAML is translated
            _WARNED.add(line)
            log.warning(line)

    optim = dict(model.get("optim") or {})
    sched = dict(optim.pop("sched", None) or {})
    opt_name = _one_of(optim.get("name", "adam"), tuple(OPTIMIZERS), "megatron_cfg.model.optim.name")
    betas = optim.get("betas", [0.9, 0.999])
    _one_of(sched.get("name"), SCHEDULERS, "megatron_cfg.model.optim.sched.name")

    model_out = dict(model, params_dtype={"float32": "32", "float16": "16", "bfloat16": "bf16"}[params_dtype])
    return {
        "model": model_out,
        "strategy": dict(
            tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
            sequence_parallel=model["sequence_parallel"],
            pipeline_dtype=params_dtype, ckpt_async_save=False,
        ),
        "precision": None if half is None else dict(
            precision=precision, params_dtype=params_dtype, pipeline_dtype=params_dtype,
            autocast_enabled=not o2, autocast_dtype=None if o2 else half, grad_reduce_in_fp32=True,
        ),
        "trainer": dict(
            devices=devices, num_nodes=nodes, accelerator="cpu" if cpu else trainer.get("accelerator", "gpu"),
            max_steps=int(trainer.get("max_steps", -1)), max_epochs=trainer.get("max_epochs", None),
            log_every_n_steps=int(trainer.get("log_every_n_steps", 1)),
            val_check_interval=trainer.get("val_check_interval", None),
            limit_val_batches=trainer.get("limit_val_batches", None),
            enable_checkpointing=bool(trainer.get("enable_checkpointing", False)),
            use_distributed_sampler=False,  # Megatron's data sampler splits the data
        ),
        "optimizer": dict(
            optimizer=OPTIMIZERS[opt_name], lr=float(optim.get("lr", 1e-4)),
            weight_decay=float(optim.get("weight_decay", 0.0)),
            adam_beta1=float(betas[0]), adam_beta2=float(betas[1]), adam_eps=float(optim.get("eps", 1e-8)),
            # NeMo's adam is torch's (weight decay in the gradient); fused_adam and
            # distributed_fused_adam are Apex's, AdamW by default
            decoupled_weight_decay=opt_name not in ("adam", "sgd"),
            sgd_momentum=float(optim.get("momentum", 0.0)),  # torch's default (megatron-core's is 0.9)
            clip_grad=0.0 if cpu else float(trainer.get("gradient_clip_val", 1.0) or 0.0),
            # on the CPU too where there is one data-parallel rank (gloo has no reduce-scatter)
            use_distributed_optimizer=opt_name == "distributed_fused_adam" and (not cpu or dp == 1),
            bf16=half == "bfloat16", fp16=half == "float16", params_dtype=params_dtype,
            # fp16's dynamic loss scale (NeMo 1's native_amp_* keys; bf16 takes none)
            initial_loss_scale=float(model.get("native_amp_init_scale", 2**32)),
            loss_scale_window=float(model.get("native_amp_growth_interval", 1000)),
            hysteresis=int(model.get("hysteresis", 2)),
        ),
        "scheduler": None if not sched.get("name") else dict(
            name=sched["name"], warmup_steps=int(sched.get("warmup_steps", 0)),
            constant_steps=int(sched.get("constant_steps", 0)), min_lr=float(sched.get("min_lr", 0.0)),
            max_steps=int(sched.get("max_steps", trainer.get("max_steps", -1))),
        ),
        "data": dict(micro_batch_size=mbs, global_batch_size=gbs, seq_len=int(model["encoder_seq_length"])),
        "logger": dict(
            name=exp.get("name") or raw.get("name") or "rlkit_nemo",
            explicit_log_dir=exp.get("explicit_log_dir"), log_dir=exp.get("exp_dir"),
            wandb=bool(exp.get("create_wandb_logger", False)), wandb_kwargs=dict(exp.get("wandb_logger_kwargs") or {}),
            tensorboard=bool(exp.get("create_tensorboard_logger", True)),
        ),
        "warnings": warnings,
    }


def departures(megatron: Mapping[str, Any], config, pretrained_model: Any) -> list[str]:
    """Where the engine reads the YAML and the rlkit config, one line each naming the key (logged
    once per process): the weights when ``pretrained_model`` is not given; which of the YAML's
    ``optim`` / ``sched`` / ``trainer.max_steps`` and the config's optimizer, scheduler and
    ``train.total_steps`` go unused (trlX's rule, :func:`rlkit_nemo.optim.yaml_rules`); a
    ``max_steps`` that does not end the run; a global batch that makes the rollouts of a phase
    repeat within a pass."""
    from rlkit_nemo.optim import yaml_rules

    lines = []
    path = getattr(config.model, "model_path", None)
    if pretrained_model is None and path not in (None, ""):
        lines.append("train.trainer_kwargs.pretrained_model: not given, so the weights are model.model_path's; trlX's NeMo "
                     "trainers built the Megatron YAML's architecture here (set model.model_path to '' for that)")
    optim, sched = megatron["optimizer"], megatron.get("scheduler")
    rate, method = float(config.optimizer.kwargs.get("lr", 1e-3)), type(config.method).__name__.removesuffix("Config")
    what = f"lr {optim['lr']:g}" + (f", {sched['name']} to {sched['min_lr']:g}" if sched else ", no sched (constant)")
    max_steps, total = megatron["trainer"]["max_steps"], int(config.train.total_steps)
    if yaml_rules(config):
        # said unless the config's is the YAML's constant rate too
        if optim["lr"] != rate or sched or str(config.scheduler.name).lower() != "constant":
            lines.append(f"optimizer, scheduler: not used with {method}; the Megatron YAML's model.optim ({what}) sets the "
                         f"rate, as trlX's NeMo ILQL and SFT trainers ran NeMo's optimizer on the YAML")
        if 0 < max_steps < total:
            lines.append(f"megatron_cfg.trainer.max_steps: the run ends after {max_steps} optimizer steps, before "
                         f"train.total_steps ({total}), as trlX's NeMo ILQL and SFT trainers ran it")
        elif max_steps > total:
            lines.append(f"megatron_cfg.trainer.max_steps: {max_steps}, but the run ends after train.total_steps ({total}); "
                         f"trlX's NeMo ILQL and SFT trainers ran max_steps (raise train.total_steps to match)")
    else:
        if optim["lr"] != rate or sched:
            lines.append(f"megatron_cfg.model.optim: {what} is not used with {method}; the rlkit config's optimizer "
                         f"({config.optimizer.name}, lr {rate:g}) and scheduler ({config.scheduler.name}) set the rate, as "
                         f"trlX's NeMoPPOTrainer wrote them into the YAML (distributed_fused_adam is taken from it)")
        if max_steps > 0 and max_steps != total:
            lines.append(f"megatron_cfg.trainer.max_steps: {max_steps} is not used with {method}; the run ends after "
                         f"train.total_steps ({total}), as trlX's NeMoPPOTrainer set max_steps from it")
    rollouts, batch = getattr(config.method, "num_rollouts", None), megatron["data"]["global_batch_size"]
    if rollouts and rollouts % batch:
        repeated = -(-rollouts // batch) * batch - rollouts
        lines.append(f"megatron_cfg.model.global_batch_size: {batch} items per optimizer step from {rollouts} rollouts per "
                     f"phase (method.num_rollouts): {repeated} of them are used twice in every pass; make num_rollouts a "
                     f"multiple of the global batch")
    for line in lines:
        if line not in _WARNED:
            _WARNED.add(line)
            log.warning(line)
    return lines
