"""Values with no meaning that `rlkit config validate` can refuse without loading a model: part
of :func:`rlkit_core.preflight.check_config`. Each line ``<dotted.path>: <problem>; <fix>``.

* sizes no run reaches: rollouts and chunks past what any device holds, a data source
  repeated millions of times (each made a run sit silent for minutes with growing memory);
* ``train.seed`` outside what the RNGs take, folders given as ``''`` (the current folder) or
  naming a file;
* the optimizer's and scheduler's numbers (a NaN or negative ``lr`` trains, silently wrong);
* ``data.*.kwargs`` a source does not take, and ``limit``/``repeat`` that mean nothing.
"""

from __future__ import annotations

import inspect
import math
from pathlib import Path
from typing import Any

# a rollout phase (or one chunk of it) of more than 2**20 sequences per process fits no
# accelerator: the same bound as a step's batch (rlkit_core.preflight)
MAX_SEQUENCES = 2**20
MAX_REPEAT = 2**16
SEED_RANGE = 2**32  # numpy's seeds; torch's and Python's take these too


def check_values(config: Any, registry: Any) -> list[str]:
    return sizes(config) + seed_and_folders(config) + optimizer_values(config) + data_kwargs(config, registry)


def sizes(config: Any) -> list[str]:
    errors = []
    for key in ("num_rollouts", "chunk_size"):
        value = getattr(config.method, key, None)
        if isinstance(value, int) and value > MAX_SEQUENCES:
            errors.append(f"method.{key}: {value} sequences per rollout phase and process fit no device (at most "
                          f"{MAX_SEQUENCES}); lower it")
    return errors


def seed_and_folders(config: Any) -> list[str]:
    train, errors = config.train, []
    if not 0 <= train.seed < SEED_RANGE:
        errors.append(f"train.seed: {train.seed} is outside 0 .. 2**32 - 1, what the random generators take; pick a seed in that range")
    for key in ("checkpoint_dir", "logging_dir", "rollout_logging_dir"):
        value = getattr(train, key)
        if value is None:
            continue
        if not str(value).strip():
            errors.append(f"train.{key}: empty; an empty path writes into the current folder: name a folder "
                          f"(or leave {key} out for the default)" if key != "checkpoint_dir" else
                          f"train.{key}: empty; an empty path writes into the current folder: name a folder")
        elif Path(value).expanduser().is_file():
            errors.append(f"train.{key}: {value} is a file, not a folder; name a folder")
    return errors


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def optimizer_values(config: Any) -> list[str]:
    """The numbers every torch optimizer and scheduler reads the same way."""
    errors = []
    for section, key, low in [("optimizer", "lr", 0.0), ("optimizer", "eps", 0.0), ("optimizer", "weight_decay", 0.0),
                              ("optimizer", "momentum", 0.0), ("scheduler", "eta_min", 0.0)]:
        kwargs = getattr(config, section).kwargs
        if key not in kwargs:
            continue
        value = _number(kwargs[key])
        if value is None or not math.isfinite(value) or value < low:
            errors.append(f"{section}.kwargs.{key}: must be a finite number >= {low:g}, got {kwargs[key]!r}")
    betas = config.optimizer.kwargs.get("betas")
    if betas is not None:
        ok = isinstance(betas, (list, tuple)) and len(betas) == 2 and all(
            (b := _number(v)) is not None and 0.0 <= b < 1.0 for v in betas)
        if not ok:
            errors.append(f"optimizer.kwargs.betas: must be two numbers in [0, 1), e.g. [0.9, 0.999]; got {betas!r}")
    for key in ("T_max", "total_iters", "step_size", "T_0"):
        value = config.scheduler.kwargs.get(key)
        if value is not None and ((v := _number(value)) is None or not v >= 1):
            errors.append(f"scheduler.kwargs.{key}: must be a number of steps >= 1, got {value!r}")
    return errors


def data_kwargs(config: Any, registry: Any) -> list[str]:
    """``data.<part>.kwargs`` against the source's signature, and sizes with no meaning."""
    errors = []
    for part in ("prompts", "eval_prompts", "samples"):
        source = getattr(config.data, part)
        if source is None:
            continue
        where = f"data.{part}.kwargs"
        kwargs = source.kwargs
        limit, repeat = kwargs.get("limit"), kwargs.get("repeat")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            errors.append(f"{where}.limit: must be a whole number >= 1 (how many items to keep), got {limit!r}")
        if repeat is not None and (isinstance(repeat, bool) or not isinstance(repeat, int) or not 1 <= repeat <= MAX_REPEAT):
            errors.append(f"{where}.repeat: must be a whole number in 1 .. {MAX_REPEAT}, got {repeat!r}; "
                          f"a source repeated that often fits no run")
        errors += _unknown_kwargs("pipeline", source.pipeline or "file", source.kwargs, registry, where)
    for key in ("reward", "metric"):
        component = getattr(config, key)
        if component is not None and component.name:
            errors += _unknown_kwargs("reward", component.name, component.kwargs, registry, f"{key}.kwargs")
    return errors


def _unknown_kwargs(kind: str, name: str, kwargs: dict[str, Any], registry: Any, where: str) -> list[str]:
    """Keys of ``kwargs`` that the registered ``kind`` ``name`` does not take (found by its signature)."""
    from rlkit_core.registry import load_target

    spec = registry.find(kind, name) if registry is not None and kwargs else None
    if spec is None:
        return []
    try:
        target = load_target(spec.target, what=f"{kind} {name!r}")
        parameters = inspect.signature(target).parameters.values()
    except Exception:  # noqa: BLE001 - a source that does not import is reported by the run
        return []
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return []
    accepted = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return [f"{where}.{key}: {name!r} takes no such argument; it takes {', '.join(sorted(accepted - {'path'})) or 'none'}"
            for key in kwargs if key not in accepted]
