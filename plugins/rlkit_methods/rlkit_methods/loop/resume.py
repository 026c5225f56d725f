"""Checks before a run resumes from a checkpoint, so a resume is exact or refused in one line.

* :func:`check_resume_config`: the saved ``config.yml`` beside the checkpoint against the
  config of the resuming run. Settings that define the loop position or the model's shape
  must match: the position counts batches of ``train.batch_size`` in permutations drawn from
  ``train.seed`` (another size or seed would silently train on other samples), and weights of
  another architecture do not load.
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
}


def check_resume_config(checkpoint: str | os.PathLike, config: Any) -> None:
    """Refuse, one line per setting, a resume whose config changes what the checkpoint means."""
    checkpoint = Path(checkpoint)
    saved_path = checkpoint / CONFIG_FILE
    if not saved_path.is_file():
        return  # written before rlkit saved configs with checkpoints: nothing to compare
    try:
        saved = yaml.safe_load(saved_path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise RlkitError(f"{saved_path}: unreadable ({str(exc).splitlines()[0][:100]}); the checkpoint is damaged, "
                         f"resume from an earlier one") from None
    current = config.to_dict() if hasattr(config, "to_dict") else dict(config)
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
    if errors:
        raise ConfigError(errors)


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
    return then == now


def _show(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."
