"""rlkit-methods' part of ``rlkit config validate`` (the hook ``rlkit_check_config``): what a
run would refuse, or silently get wrong, found before a model is loaded: fields of an inline
``model.model_path`` mapping that its transformers config class does not have (transformers
keeps unknown ones as plain attributes: a typo trains another model), generation settings
transformers refuses at the first generate, optimizer and scheduler arguments. transformers
and torch are imported inside the functions."""

from __future__ import annotations

import difflib
import inspect
from typing import Any, Callable

# what rlkit's own generate takes beside transformers' settings (ILQL's guidance)
RLKIT_GENERATE_ARGS = {"beta", "logit_mask", "behaviour_top_k"}
# model inputs generate() passes through to the forward pass
MODEL_INPUTS = {"attention_mask", "position_ids", "token_type_ids", "use_cache", "decoder_attention_mask"}


def check_config(config) -> list[str]:
    from rlkit_methods.config_value_checks import generation_values, inline_model_shape

    errors = model_path_fields(config.model.model_path)
    errors += [] if errors else inline_model_shape(config)
    for section in ("gen_kwargs", "gen_experience_kwargs"):
        errors += generation_keys(f"method.{section}", getattr(config.method, section, None) or {})
        errors += generation_values(f"method.{section}", getattr(config.method, section, None) or {})
    errors += class_kwargs("optimizer", config.optimizer.name, config.optimizer.kwargs, skip=1)
    errors += class_kwargs("scheduler", config.scheduler.name, config.scheduler.kwargs, skip=1)
    errors += missing_paths(config)
    return errors


# the pipelines that read a local file or saved folder (``kwargs.path``)
LOCAL_PIPELINES = ("file", "dataset", "preference_pairs", "logged_completions")


def missing_paths(config) -> list[str]:
    """Files and folders the run reads that are not there: pairs or logged rows a step before
    was to write, a reward model not trained yet. The reward model loads at the first rollout's
    scoring, so without this a run would load the policy and sample before it stopped."""
    from pathlib import Path

    from rlkit_core.preflight import looks_like_a_folder

    errors = []
    for key in ("prompts", "eval_prompts", "samples"):
        source = getattr(config.data, key, None)
        path = (source.kwargs or {}).get("path") if source is not None and source.pipeline in LOCAL_PIPELINES else None
        if isinstance(path, str) and not Path(path).expanduser().exists():
            errors.append(f"data.{key}.kwargs.path: {path!r} not found (pipeline {source.pipeline}); make it first "
                          f"(the step that writes it), or point the path at an existing file")
    reward = getattr(config, "reward", None)
    path = (reward.kwargs or {}).get("path") if reward is not None and reward.name == "reward_model" else None
    # a hub id (org/name) may load where the hub is reachable; a local-looking path must be there
    if isinstance(path, str) and looks_like_a_folder(path) and not Path(path).expanduser().is_dir():
        errors.append(f"reward.kwargs.path: {path!r} not found (reward reward_model); train the reward model first "
                      f"(its run exports one), or point the path at a sequence-classifier folder")
    return errors


def model_path_fields(model_path: Any) -> list[str]:
    """An inline mapping (a model built from a config) names a model_type and its fields."""
    if not isinstance(model_path, dict):
        return []
    from transformers import CONFIG_MAPPING, PretrainedConfig

    model_type = model_path.get("model_type")
    if model_type not in CONFIG_MAPPING:
        close = difflib.get_close_matches(str(model_type), list(CONFIG_MAPPING.keys()), n=1)
        hint = f"; did you mean {close[0]}?" if close else " (e.g. gpt2, llama, t5)"
        return [f"model.model_path.model_type: {model_type!r} is not a transformers model type{hint}"]
    config_class = CONFIG_MAPPING[model_type]
    from transformers import GenerationConfig

    # the config's fields, their aliases, and generation ids models still read from their
    # config (T5's decoder_start_token_id)
    known = set(config_class().to_dict()) | set(getattr(config_class, "attribute_map", {})) | set(GenerationConfig().to_dict())
    for cls in (config_class, PretrainedConfig):
        known |= {p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "kwargs")}
    errors = []
    for key in model_path:
        if key not in known:
            close = difflib.get_close_matches(str(key), sorted(known), n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}?" if close else f"see transformers' {config_class.__name__}"
            errors.append(f"model.model_path.{key}: not a field of {config_class.__name__} ({model_type}); {hint}")
    return errors


def generation_settings() -> set[str]:
    from transformers import GenerationConfig
    from transformers.generation.utils import GenerationMixin

    params = set(inspect.signature(GenerationMixin.generate).parameters) - {"self", "inputs", "kwargs"}
    return set(GenerationConfig().to_dict()) | params | RLKIT_GENERATE_ARGS | MODEL_INPUTS


def generation_keys(path: str, kwargs: dict[str, Any]) -> list[str]:
    """A misspelled generation setting is refused by transformers at the first generate, after
    the model is loaded and (for PPO) before any step: say it now."""
    if not kwargs:
        return []
    known = generation_settings()
    errors = []
    for key in kwargs:
        if key not in known:
            close = difflib.get_close_matches(str(key), sorted(known), n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}?" if close else "see transformers' GenerationConfig"
            errors.append(f"{path}.{key}: not a generation setting; {hint}")
    return errors


def class_kwargs(section: str, name: str, kwargs: dict[str, Any], *, skip: int) -> list[str]:
    """``<section>.kwargs`` against the signature of the class ``<section>.name`` selects
    (the first ``skip`` parameters are given by rlkit: the parameters, the optimizer)."""
    from rlkit_methods.common.optim import get_optimizer_class, get_scheduler_class

    lookup: Callable[[str], type] = get_optimizer_class if section == "optimizer" else get_scheduler_class
    try:
        cls = lookup(name)
    except (ValueError, ImportError) as exc:
        return [str(exc) if str(exc).startswith(f"{section}.") else f"{section}.name: {exc}"]
    # a class (torch's schedulers) or a function (transformers' warmup schedules)
    is_class = isinstance(cls, type)
    parameters = list(inspect.signature(cls.__init__ if is_class else cls).parameters.values())[int(is_class) + skip:]
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return []
    accepted = [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    errors = []
    for key in kwargs:
        if key not in accepted:
            close = difflib.get_close_matches(str(key), accepted, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}?" if close else f"{cls.__name__} takes {', '.join(accepted)}"
            errors.append(f"{section}.kwargs.{key}: {cls.__name__} has no such argument; {hint}")
    return errors
