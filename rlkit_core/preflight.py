"""What a run would refuse, found before a model is loaded: ``rlkit config validate`` runs it,
``rlkit run`` runs it before it loads data, and ``train()`` runs it before it builds a trainer
(a config handed to the Python API is refused as ``validate`` refuses it).

The schema (:mod:`rlkit_core.config`) checks each value alone; this checks what needs more:
generation lengths against ``seq_length``, sizes with no meaning, the trainer against the
method, the tracker's package. Plugins add their own checks through the hook
``rlkit_check_config``: rlkit-methods checks the keys of an inline ``model.model_path``
mapping against transformers' config class of its ``model_type``, ``gen_kwargs``, and
``optimizer.kwargs``/``scheduler.kwargs`` against the class's signature.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import re
from pathlib import Path
from typing import Any, Callable, Iterator

from rlkit_core.config import TRLConfig
from rlkit_core.errors import ConfigError, PluginError, RlkitError
from rlkit_core.preflight_values import check_values

# A step of more than 2**20 sequences per process fits no accelerator, and index lists that
# size are what made a huge batch_size hang with growing memory; 2**31 tokens in one forward
# pass overflow the int32 indexing of many kernels (and 8 GiB per float of hidden size).
MAX_SEQUENCES_PER_STEP = 2**20
MAX_TOKENS_PER_FORWARD = 2**31

log = logging.getLogger(__name__)
_CHECKED: list[TRLConfig] = []  # configs `rlkit run` checked and is training now (train() skips them)


def preflight(config: TRLConfig, registry: Any, hook: Any = None, warn: Callable[[str], None] | None = None,
              source: str | os.PathLike | None = None) -> TRLConfig:
    """Every problem of :func:`check_config` as one :class:`ConfigError` (a line each), then each
    line of :func:`warnings_for` to ``warn`` (a logging warning by default); returns ``config``.
    A config inside :func:`checked` was checked already and is returned unchecked. ``source``,
    the YAML file the config came from, lets an error quote the file's ``# made by:`` command."""
    if any(config is seen for seen in _CHECKED):
        return config
    problems = check_config(config, registry, hook, source=source)
    if problems:
        raise ConfigError(problems)
    for line in warnings_for(config):
        (warn or log.warning)(line)
    return config


@contextlib.contextmanager
def checked(config: TRLConfig) -> Iterator[TRLConfig]:
    """``config`` passed :func:`preflight` (``rlkit run`` checks before loading data): the
    ``train()`` inside this block does not check it again or repeat its warnings."""
    _CHECKED.append(config)
    try:
        yield config
    finally:
        _CHECKED.pop(next(i for i, seen in enumerate(_CHECKED) if seen is config))


def check_config(config: TRLConfig, registry: Any, hook: Any = None, *, source: str | os.PathLike | None = None) -> list[str]:
    """Every problem as one line ``<dotted.path>: <problem>``; [] when a run would start."""
    errors = missing_model_folder(config, source)
    errors += generation_lengths(config)
    errors += sizes(config)
    errors += trainer_matches_method(config, registry)
    errors += tracker_installed(config.train.tracker)
    errors += functions_importable(config)
    errors += check_values(config, registry)
    if hook is not None:
        for impl in hook.rlkit_check_config.get_hookimpls():
            lines = impl.function(*[{"config": config}[name] for name in impl.argnames])
            if lines is None:
                continue
            if not isinstance(lines, (list, tuple)) or not all(isinstance(line, str) for line in lines):
                raise PluginError(f"plugin {impl.plugin_name!r}: rlkit_check_config must return a list of strings, "
                                  f"got {type(lines).__name__}")
            errors += list(lines)
    return errors


def warnings_for(config: TRLConfig) -> list[str]:
    """Things a run will do that a user should know about, one line each."""
    lines = []
    if config.model.trust_remote_code:
        lines.append(f"model.trust_remote_code: true runs Python code shipped with {config.model.model_path!r}; "
                     f"use it only with a model and tokenizer you trust")
    return lines


def looks_like_a_folder(name: str) -> bool:
    """A local path, not a hub id (``org/name``) or a model source name (``smollm2-135m``)."""
    return name.startswith((".", "/", "~")) or name.count("/") >= 2 or "\\" in name


def missing_model_folder(config: TRLConfig, source: str | os.PathLike | None = None) -> list[str]:
    """A ``model.model_path`` folder that is not there: an error before anything loads, naming
    the command that makes it when the config file says so (``model_path: ...  # made by: CMD``,
    as the examples that start from another run's model do)."""
    path = config.model.model_path
    if not isinstance(path, str) or not looks_like_a_folder(path) or Path(path).expanduser().is_dir():
        return []
    command = made_by(source, path)
    fix = (f"make it first: {command}" if command else
           "make it first (the run that writes it), or point model.model_path at a model folder or name")
    return [f"model.model_path {path!r}: no such folder; {fix}"]


def made_by(source: str | os.PathLike | None, model_path: str) -> str | None:
    """The ``# made by: CMD`` comment on ``source``'s own ``model_path:`` line, if that line
    still gives ``model_path`` (not replaced by ``--set``)."""
    if source is None or not Path(source).is_file():
        return None
    for line in Path(source).read_text(errors="replace").splitlines():
        found = _MADE_BY.match(line)
        if found and found.group(1).strip("'\"") == model_path:
            return found.group(2).strip()
    return None


_MADE_BY = re.compile(r"^\s*model_path:\s*(\S+)\s*#\s*made by:\s*(.+)$")


def generation_lengths(config: TRLConfig) -> list[str]:
    """``max_new_tokens`` > 0 in every generation setting, and room left for a prompt."""
    errors, longest = [], 0
    for section in ("gen_kwargs", "gen_experience_kwargs"):
        kwargs = getattr(config.method, section, None) or {}
        values = kwargs.get("max_new_tokens")
        for value in values if isinstance(values, list) else [values]:
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                errors.append(f"method.{section}.max_new_tokens: must be a whole number > 0, got {value!r}")
            else:
                longest = max(longest, value)
    if longest and config.train.seq_length <= longest:
        errors.append(
            f"train.seq_length: {config.train.seq_length} leaves no room for prompts after max_new_tokens={longest}; "
            f"raise seq_length or lower max_new_tokens"
        )
    return errors


def sizes(config: TRLConfig) -> list[str]:
    train, errors = config.train, []
    if train.batch_size > MAX_SEQUENCES_PER_STEP:
        errors.append(f"train.batch_size: {train.batch_size} sequences per step and process fit no device "
                      f"(at most {MAX_SEQUENCES_PER_STEP}); lower it")
    per_forward = (train.minibatch_size or train.batch_size) * train.seq_length
    if per_forward > MAX_TOKENS_PER_FORWARD and not errors:
        errors.append(f"train.batch_size: {train.minibatch_size or train.batch_size} x seq_length {train.seq_length} "
                      f"= {per_forward} tokens in one forward pass fit no device; set train.minibatch_size to split "
                      f"each batch (gradient accumulation)")
    if train.minibatch_size and train.minibatch_size > train.batch_size:
        errors.append(f"train.minibatch_size: {train.minibatch_size} is larger than train.batch_size "
                      f"{train.batch_size}; a micro-batch is a part of a batch")
    return errors


def trainer_matches_method(config: TRLConfig, registry: Any) -> list[str]:
    """What ``train()`` refuses about the trainer (an unknown name is ``check_names``' job)."""
    from rlkit_core.api import resolve_trainer

    method = registry.find("method", config.method.name)
    if method is None:
        return []
    try:
        resolve_trainer(config, method, registry)
    except ConfigError as exc:
        return list(exc.errors)
    except RlkitError:
        return []  # unknown trainer: reported by check_names
    return []


def functions_importable(config: TRLConfig) -> list[str]:
    """``reward.function`` / ``metric.function``: the module exists (found, not imported: the
    run imports it, with whatever that module does at import)."""
    errors = []
    for key in ("reward", "metric"):
        component = getattr(config, key)
        function = getattr(component, "function", None)
        if not function or ":" not in function:
            continue
        module = function.partition(":")[0]
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package that is missing or broken
            found = False
        if not found:
            errors.append(f"{key}.function: module {module!r} not found (from {function!r}); "
                          f"check the name, or make it importable (PYTHONPATH, pip install)")
    return errors


def tracker_installed(tracker: str | None) -> list[str]:
    if tracker and importlib.util.find_spec(tracker) is None:
        return [f"train.tracker: {tracker} is not installed; pip install {tracker}, or set train.tracker: null"]
    return []
