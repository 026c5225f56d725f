"""Checks before a run resumes from a checkpoint, so a resume is exact or refused in one line.

* :func:`check_resume_config`: the saved ``config.yml`` beside the checkpoint against the
  config of the resuming run. Settings that define the loop position or the model's shape
  must match: the position counts batches of ``train.batch_size`` in permutations drawn from
  ``train.seed`` (another size or seed would silently train on other samples), and weights of
  another architecture do not load.
* Every other setting that changes the run (the optimizer, the schedule, lengths, the
  reward, the tokenizer, ...) must match too, unless ``train.resume_config_changes: allow``
  says the change is intended: one line names each differing key with both values. What only
  says how long to train, where to write, or how to report, which generator samples the
  policy, and how a batch is laid out (packing, a token budget) (:data:`MAY_CHANGE`), may differ.
  A checkpoint without ``config.yml`` cannot be checked and is refused the same way.
* :func:`steps_left`: a checkpoint already at ``train.total_steps`` has nothing left to train;
  the loop must not take one more step.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from rlkit_core.errors import ConfigError, RlkitError

CONFIG_FILE = "config.yml"
# dotted key -> why it must not change on resume
MUST_MATCH = {
    "train.batch_size": "the loop position counts batches of that size",
    "train.seed": "each pass's sample order is drawn from it",
    "method.name": "the checkpoint holds that method's state",
    "method.num_rollouts": "the rollout store and the position depend on it",
    "method.chunk_size": "rollouts are made in chunks of that size",
    "method.ppo_epochs": "the position counts passes over each rollout store",
    "model.model_arch_type": "weights of another architecture do not load",
    "model.num_layers_unfrozen": "the trained blocks and the reference model depend on it",
    "model.peft_config": "the checkpoint holds those adapters",
    "train.async_rollouts": "the checkpoint holds the rollouts sampled ahead on that schedule, or none",
    "train.max_staleness": "the checkpoint holds that many phases of rollouts sampled ahead",
}


# what a resumed run may change without changing what it trains: its length, its folders,
# its reports (dotted prefixes)
MAY_CHANGE = (
    "train.total_steps", "train.epochs", "train.eval_interval", "train.checkpoint_interval", "train.checkpoint_dir",
    "train.logging_dir", "train.rollout_logging_dir", "train.resume_from_checkpoint", "train.overwrite_checkpoint_dir",
    "train.tracker", "train.project_name", "train.run_name", "train.entity_name", "train.group_name", "train.tags",
    "train.save_best", "train.save_optimizer", "train.stop_on_nonfinite", "train.resume_config_changes",
    "data.eval_prompts", "metric",
    # which sampler draws from the policy, not what is trained: a run whose generator process died
    # may resume on the engine's own sampler, or move vLLM to another device (the draws differ)
    "train.generator", "train.generator_kwargs",
    # how the same batch is laid out for the engine, not what it trains: rows packed into bins
    # and micro-batches cut by a token budget give the padded step's loss (within float
    # tolerance, tests/accelerate/trainers/test_trainer_packing.py, test_trainer_token_budget.py),
    # so a run may resume with them on another machine's memory
    "train.packing", "train.minibatch_tokens",
)
SWITCH = "train.resume_config_changes=allow"


def check_resume_config(checkpoint: str | os.PathLike, config: Any) -> None:
    """Refuse, one line per setting, a resume whose config changes what the checkpoint means."""
    checkpoint = Path(checkpoint)
    saved_path = checkpoint / CONFIG_FILE
    current = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    allowed = _get(current, "train.resume_config_changes") == "allow"
    if not saved_path.is_file():
        if allowed:
            return
        raise ConfigError(f"train.resume_from_checkpoint: {checkpoint} has no {CONFIG_FILE}, so rlkit cannot check that "
                          f"this run resumes it with the same settings; restore it, or set {SWITCH} to resume anyway")
    try:
        saved = yaml.safe_load(saved_path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise RlkitError(f"{saved_path}: unreadable ({str(exc).splitlines()[0][:100]}); the checkpoint is damaged, "
                         f"resume from an earlier one") from None
    errors = []
    for key, why in MUST_MATCH.items():
        then, now = _get(saved, key), _get(current, key)
        if then is _MISSING or now is _MISSING or _same(then, now, key):
            continue
        errors.append(f"{key}: {_show(now)}, but {checkpoint} was trained with {_show(then)} ({why}); "
                      f"resume with {key}={_show(then)}, or start a new run")
    then, now = _get(saved, "model.model_path"), _get(current, "model.model_path")
    if isinstance(then, dict) and isinstance(now, dict) and then != now:  # models built from a config
        changed = sorted(k for k in set(then) | set(now) if then.get(k) != now.get(k))
        errors.append(f"model.model_path: {', '.join(changed)} differ from {checkpoint}'s model "
                      f"({', '.join(f'{k}={_show(then.get(k))}' for k in changed)}); its weights do not fit another "
                      f"architecture: resume with the same model, or start a new run")
    elif isinstance(then, (str, dict)) and isinstance(now, (str, dict)) and then != now:  # objects from Python are not compared
        errors.append(f"model.model_path: {_show(now)}, but {checkpoint} was trained from {_show(then)}; its weights "
                      f"are that model's: resume with model.model_path={_show(then)}, or start a new run")
    if not errors and not allowed:
        changed = [key for key in sorted(set(_leaves(saved)) | set(_leaves(current)))
                   if key not in MUST_MATCH and not key.startswith("model.model_path")
                   and not any(key == p or key.startswith(p + ".") for p in MAY_CHANGE)
                   and _plain(_get(current, key)) and not _same(_get(saved, key), _get(current, key), key)]
        if changed:
            shown = "; ".join(f"{k}: {_show(_get(current, k))} (checkpoint: {_show(_get(saved, k))})" for k in changed)
            errors.append(f"resume: the config differs from {checkpoint}'s in what changes the run: {shown}; resume with "
                          f"the checkpoint's values, or set {SWITCH} if the change is intended")
    if errors:
        raise ConfigError(errors)


def _plain(value: Any) -> bool:
    """A value as YAML holds it; objects given from Python (a tokenizer, a transformers
    config) are saved as their repr and cannot be compared."""
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    return value is _MISSING or value is None or isinstance(value, (str, int, float, bool))


def _leaves(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted keys of a nested mapping, down to its non-mapping values."""
    if not isinstance(tree, dict):
        return {prefix: tree} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(_leaves(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def steps_left(iter_count: int, total_steps: int) -> int:
    """How many optimizer steps a resumed run still has to take (0: it is finished)."""
    return max(total_steps - iter_count, 0)


def finished_message(checkpoint: str | os.PathLike, iter_count: int, total_steps: int) -> str:
    return (f"{checkpoint} is at step {iter_count}, train.total_steps is {total_steps}: nothing left to train; "
            f"raise train.total_steps to train further")


_MISSING = object()


def _get(tree: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return _MISSING
        tree = tree[part]
    return tree


def _same(then: Any, now: Any, key: str) -> bool:
    if key == "method.name":
        return str(then).lower().removesuffix("config") == str(now).lower().removesuffix("config")
    if isinstance(then, (list, tuple)) and isinstance(now, (list, tuple)):
        return list(then) == list(now)  # YAML gives lists where the config held tuples
    return then == now or then is _MISSING and now in (None, {}, []) or now is _MISSING and then in (None, {}, [])


def _show(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."
