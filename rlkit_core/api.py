"""``train()``: trlX's entry point, dispatching through the plugin registry.

* ``reward_fn`` (+ ``prompts``) -> online training (PPO);
* ``samples`` + ``rewards`` -> offline training (ILQL);
* ``samples`` alone -> supervised fine-tuning (SFT).

The trainer is the one named by ``train.trainer`` (a trlX class name such as
``AcceleratePPOTrainer``), looked up in the registry. A trainer class is constructed as
``Trainer(config=..., reward_fn=..., metric_fn=..., stop_sequences=..., **train.trainer_kwargs)``
(plus ``logit_mask=`` when given) and must offer trlX's ``tokenizer``, ``add_prompt_pipeline``,
``add_eval_pipeline``, ``make_experience`` and ``learn``, and an ``is_main_process`` flag.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import attrs

from rlkit_core.config import TRLConfig
from rlkit_core.errors import ConfigError, RegistryError
from rlkit_core.plugins import get_host
from rlkit_core.preflight import preflight
from rlkit_core.registry import MethodSpec, Registry, TrainerSpec, load_target

MODE_ARGUMENTS = {
    "online": "reward_fn and prompts",
    "offline": "samples and rewards",
    "supervised": "samples (and no rewards)",
}


def train(
    model_path: Any = None,
    reward_fn: Callable | None = None,
    samples: Sequence | None = None,
    rewards: Sequence[float] | None = None,
    prompts: Sequence | None = None,
    eval_prompts: Sequence | None = None,
    metric_fn: Callable | None = None,
    config: TRLConfig | None = None,
    stop_sequences: Sequence[str] | None = None,
    logit_mask: Any = None,
    plugins: Iterable[Any] | None = None,
):
    """Train a model as trlX's ``trlx.train`` does, and return the trainer.

    ``plugins`` are objects with ``@hookimpl`` methods, registered for this run only.
    """
    host = get_host()
    run_plugins = [host.register(plugin) for plugin in plugins or []]
    try:
        registry = host.registry
        mode = dispatch_mode(reward_fn, samples, rewards)
        prompts, eval_prompts = (list(p) if p is not None and not isinstance(p, (str, bytes)) else p for p in (prompts, eval_prompts))
        check_arguments(mode, reward_fn=reward_fn, samples=samples, rewards=rewards, prompts=prompts,
                        eval_prompts=eval_prompts, metric_fn=metric_fn, stop_sequences=stop_sequences)
        if config is None:
            config = default_config(mode, registry)
        if model_path is not None:
            config = with_model_path(config, model_path)
        method = registry.get("method", config.method.name)
        if method.mode != mode:
            raise ConfigError(
                f"method.name: {config.method.name} trains {method.mode} from "
                f"{MODE_ARGUMENTS[method.mode]}, but train() got {MODE_ARGUMENTS[mode]}"
            )
        if rewards is not None and samples is not None and len(samples) != len(rewards):
            raise ConfigError(f"rewards: got {len(rewards)} rewards for {len(samples)} samples; give one per sample")

        # fail before a model is loaded, on what `rlkit config validate` refuses
        preflight(config, registry, host.hook)
        max_prompt_length(config)
        if prompts is not None and len(prompts) == 0:
            raise ConfigError("prompts: the list is empty; give at least one prompt, or leave prompts out to start from BOS")
        trainer_cls = load_target(resolve_trainer(config, method, registry).target, what="trainer")
        extra = {"logit_mask": logit_mask} if logit_mask is not None else {}
        trainer = trainer_cls(
            config=config,
            reward_fn=reward_fn,
            metric_fn=metric_fn,
            stop_sequences=stop_sequences,
            **extra,
            **config.train.trainer_kwargs,
        )
        _feed(trainer, config, registry, mode, samples, rewards, prompts, eval_prompts)
        return _learn(trainer, config, host)
    finally:
        for name in run_plugins:
            host.unregister(name)


def dispatch_mode(reward_fn: Any, samples: Any, rewards: Any) -> str:
    if reward_fn is not None:
        return "online"
    if samples is not None:
        return "offline" if rewards is not None else "supervised"
    raise ConfigError("train(): give reward_fn (online, e.g. PPO) or samples (offline ILQL with rewards, or SFT)")


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model", "spiece.model")


def with_model_path(config: TRLConfig, model_path: Any) -> TRLConfig:
    """``config`` training ``model_path``. A tokenizer that was the old model's own (the default
    configs: both ``smollm2-135m``) becomes the new model's, as trlX's defaults paired them: a
    model kept under another model's vocabulary trains on the wrong token ids without a word.
    A folder without tokenizer files keeps the config's tokenizer."""
    model = attrs.evolve(config.model, model_path=model_path)
    tokenizer = config.tokenizer
    follows = isinstance(model_path, (str, os.PathLike)) and tokenizer.tokenizer_path == config.model.model_path
    folder = Path(os.fspath(model_path)).expanduser() if follows else None
    if follows and (not folder.is_dir() or any((folder / name).is_file() for name in TOKENIZER_FILES)):
        tokenizer = attrs.evolve(tokenizer, tokenizer_path=os.fspath(model_path))
    return attrs.evolve(config, model=model, tokenizer=tokenizer)


# what each mode trains from: anything else given to train() would be ignored
UNUSED = {"online": ("samples", "rewards"), "offline": ("prompts",), "supervised": ("prompts",)}


def check_arguments(mode: str, **given: Any) -> None:
    """Refuse what ``train()`` would ignore or misread, before a model loads: an argument the
    mode does not use, a string where a list is meant (it would be split into characters),
    empty prompts, stop sequences that are not non-empty strings, functions that are not."""
    for name in UNUSED[mode]:
        if given[name] is not None:
            uses = MODE_ARGUMENTS[mode]
            raise ConfigError(f"{name}: train() with {uses} trains {mode} and does not use {name}; leave it out "
                              f"(or give {MODE_ARGUMENTS['offline'] if name == 'samples' else 'the arguments of the mode you mean'})")
    for name in ("samples", "rewards", "prompts", "eval_prompts", "stop_sequences"):
        value = given[name]
        if isinstance(value, (str, bytes)):
            raise ConfigError(f"{name}: got a string ({value[:20]!r}), which would be read as one item per character; give a list, e.g. [{value[:20]!r}]")
    for name in ("prompts", "eval_prompts"):
        value = given[name]
        if value is None:
            continue
        items = list(value)
        if len(items) == 0 and name == "eval_prompts":
            raise ConfigError("eval_prompts: the list is empty; give at least one prompt, or leave eval_prompts out")
        for i, item in enumerate(items):
            if item is None or not isinstance(item, (str, dict, list, tuple)):
                raise ConfigError(f"{name}[{i}]: expected a string (or a dict with 'prompt'), got {type(item).__name__}")
        if items and all(isinstance(item, str) and not item.strip() for item in items):
            raise ConfigError(f"{name}: every prompt is empty; give text, or leave {name} out to start from BOS")
    for i, stop in enumerate(given["stop_sequences"] or []):
        if not isinstance(stop, str) or not stop:
            raise ConfigError(f"stop_sequences[{i}]: expected a non-empty string, got {stop!r} (an empty one would cut every output)")
    for name in ("reward_fn", "metric_fn"):
        value = given[name]
        # GRPO/RLOO take several reward functions (TRL's reward_funcs): a list of functions
        functions = value if name == "reward_fn" and isinstance(value, (list, tuple)) else [value]
        for fn in functions:
            if fn is not None and not callable(fn):
                raise ConfigError(f"{name}: expected a function{' or a list of functions' if name == 'reward_fn' else ''}, "
                                  f"got {type(fn).__name__}")


def default_config(mode: str, registry: Registry) -> TRLConfig:
    """The default config of the installed method for a mode (trlX's default_*_config)."""
    candidates = [e.spec for e in registry.entries("method") if e.spec.mode == mode and e.spec.default_config]
    if not candidates:
        installed = ", ".join(registry.names("method")) or "none"
        raise RegistryError(f"no method for {mode} training is installed (methods: {installed}); pip install rlkit-methods")
    preferred = {"online": "ppo", "offline": "ilql", "supervised": "sft"}[mode]
    spec = next((s for s in candidates if s.name.lower() == preferred), candidates[0])
    return load_target(spec.default_config, what=f"default config of {spec.name}")()


def resolve_trainer(config: TRLConfig, method: MethodSpec, registry: Registry) -> TrainerSpec:
    """The trainer named by ``train.trainer``, checked against the method and backend."""
    name = config.train.trainer
    spec = registry.find("trainer", name)  # a registered trainer, or a method x engine pair (rlkit_core.pairing)
    backend = config.train.backend or (spec.backend if spec else _backend_from_trainer_name(name, method))
    if spec is None:
        installed = ", ".join(
            f"{t.spec.name} ({t.spec.backend}/{t.spec.method or 'any'})" for t in registry.entries("trainer")
        ) or "none"
        hint = "; " + "; ".join(f"plugin {p!r} failed to load ({e})" for p, e in registry.failed.items()) if registry.failed else ""
        raise RegistryError(
            f"no trainer for method {method.name} on backend {backend} (train.trainer: {name}); "
            f"installed trainers: {installed}{hint}"
        )
    if spec.method is not None and spec.method.lower() != method.name.lower():
        fitting = [t.spec.name for t in registry.entries("trainer") if (t.spec.method or "").lower() == method.name.lower()]
        raise ConfigError(
            f"train.trainer: {name} trains {spec.method}, but method.name selects {method.name}; "
            f"use one of: {', '.join(fitting) or 'none installed'}"
        )
    if config.train.backend and spec.backend and spec.backend.lower() != config.train.backend.lower():
        raise ConfigError(f"train.trainer: {name} runs on backend {spec.backend}, but train.backend is {config.train.backend}")
    return spec


def _backend_from_trainer_name(name: str, method: MethodSpec) -> str:
    """``AcceleratePPOTrainer`` -> ``accelerate`` (for messages about missing trainers)."""
    stem = re.sub(r"Trainer$", "", name)
    for alias in sorted(method.names, key=len, reverse=True):
        if stem.lower().endswith(alias.lower()):
            stem = stem[: -len(alias)]
            break
    return stem.lower() or "?"


def max_prompt_length(config: TRLConfig) -> int:
    """``seq_length - max_new_tokens``, the room left for a prompt (trlX's rule)."""
    max_new_tokens = (getattr(config.method, "gen_kwargs", None) or {}).get("max_new_tokens", 0)
    room = config.train.seq_length - max_new_tokens
    if room <= 0:
        raise ConfigError(
            f"train.seq_length: {config.train.seq_length} leaves no room for prompts after "
            f"method.gen_kwargs.max_new_tokens={max_new_tokens}; raise seq_length or lower max_new_tokens"
        )
    return room


def _feed(trainer, config, registry, mode, samples, rewards, prompts, eval_prompts) -> None:
    """Hand the data to the trainer exactly as trlX's ``train()`` does."""
    batch_size = config.train.batch_size * int(os.environ.get("WORLD_SIZE", 1))
    prompt_budget = max_prompt_length(config)
    pipeline_spec = registry.get("pipeline", config.train.pipeline, where=lambda s: s.kind == "prompt")
    pipeline_cls = load_target(pipeline_spec.target, what="pipeline")
    seq2seq = config.model.model_arch_type == "seq2seq"

    template = {"chat_template": config.tokenizer.chat_template} if config.tokenizer.chat_template else {}

    def pipeline(items):
        return pipeline_cls(items, prompt_budget, trainer.tokenizer, add_special_tokens=seq2seq, **template)

    if mode == "online":
        prompts = list(prompts) if prompts is not None else [trainer.tokenizer.bos_token] * batch_size
        if eval_prompts is None:
            eval_prompts = prompts[:batch_size]
        trainer.add_prompt_pipeline(pipeline(prompts))
        # a method without num_rollouts (RFT samples a fixed number per prompt) gets None
        trainer.make_experience(getattr(config.method, "num_rollouts", None))
    else:
        if eval_prompts is None:
            eval_prompts = [trainer.tokenizer.bos_token] * batch_size
        if rewards is not None:
            trainer.make_experience(samples, rewards, config.train.seq_length)
        else:
            trainer.make_experience(samples, config.train.seq_length)
    trainer.add_eval_pipeline(pipeline(list(eval_prompts)))


def _learn(trainer, config, host):
    is_main = bool(getattr(trainer, "is_main_process", True))
    host.hook.rlkit_train_start(trainer=trainer, config=config, is_main_process=is_main)
    try:
        trainer.learn()
    except BaseException as exc:
        host.hook.rlkit_train_end(trainer=trainer, error=exc, is_main_process=is_main)
        raise
    host.hook.rlkit_train_end(trainer=trainer, error=None, is_main_process=is_main)
    return trainer
