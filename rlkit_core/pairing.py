"""Trainers as pairings: a method's trainer on an engine, named as trlX named them.

trlX wrote one class per method and backend (``AcceleratePPOTrainer``, ``NeMoILQLTrainer``,
...). rlkit writes each side once: a method registers its trainer
(``MethodSpec(trainer=...)``), a backend its engine (``BackendSpec(engine=...)``), and every
pair is a trainer named ``<prefix><Method>Trainer``: the backend's ``trainer_prefix``
(``Accelerate``, ``NeMo``) and the method's config class name without ``Config`` (``PPO``,
``RLOO``, ``Reinforce``). The registry lists every pair (``Registry.pairings``) and selects one
by name, case-insensitively; :func:`paired_class` makes its class once per process, so
``train.trainer: AcceleratePPOTrainer``, ``get_trainer("AcceleratePPOTrainer")`` and
``from rlkit_accelerate.trainers import AcceleratePPOTrainer`` are the same class.

The class is the method's trainer (a subclass, ``engine_class`` set) with trlX's constructor::

    Pair(config, *, reward_fn=None, metric_fn=None, stop_sequences=None, logit_mask=None,
         train_mode=True, <the engine's keyword arguments>, **kwargs)

The engine's keyword arguments are those of its constructor after ``config`` (NeMo's
``megatron_cfg`` and ``pretrained_model``); they go to the engine. trlX's ``train_mode`` is
kept as an attribute (the loop trains whenever ``learn()`` is called). Arguments after
``config`` are keywords: trlX's NeMo classes took them positionally in a different order per
method, so a positional one is refused rather than bound to the wrong name. A backend's
``requires`` is called with ``"train.trainer: <Name>"`` before anything is built, to refuse a
missing dependency in one line.

No torch here: the method's trainer and the engine are imported when a class is made.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

import attrs

TRLX_KEYWORDS = ("reward_fn", "metric_fn", "stop_sequences", "logit_mask")


def method_stem(method: Any) -> str:
    """``PPO`` for a method whose config class is ``PPOConfig`` (an import string or a class);
    the method's name when the class name does not end in ``Config``."""
    target = method.config_class
    name = target.rpartition(":")[2].rpartition(".")[2] if isinstance(target, str) else getattr(target, "__name__", "")
    return name[: -len("Config")] if name.endswith("Config") and len(name) > len("Config") else method.name


def trainer_name(backend: Any, method: Any) -> str:
    """trlX's class name of the pair: ``AcceleratePPOTrainer``."""
    return f"{backend.trainer_prefix or backend.name.capitalize()}{method_stem(method)}Trainer"


@attrs.frozen
class Pairing:
    """A pair's import strings (or objects), loaded into its class by :meth:`load`."""

    name: str
    trainer: Any
    engine: Any
    requires: Any = None

    def load(self) -> type:
        from rlkit_core.registry import load_target

        trainer = load_target(self.trainer, what=f"trainer of {self.name}")
        engine = load_target(self.engine, what=f"engine of {self.name}")
        requires = None if self.requires is None else load_target(self.requires, what=f"requires of {self.name}")
        return paired_class(self.name, trainer, engine, requires)


def engine_keywords(engine: Callable) -> list[inspect.Parameter]:
    """The engine constructor's named parameters after ``config``, as keyword-only ones."""
    try:
        params = list(inspect.signature(engine).parameters.values())[1:]
    except (TypeError, ValueError):  # no signature to read: the pair takes **kwargs only
        return []
    return [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params
            if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]


@functools.cache
def paired_class(name: str, trainer: type, engine: Callable, requires: Callable | None = None) -> type:
    """The class ``name``: ``trainer`` running on ``engine`` with trlX's constructor (module
    docstring). One class per arguments, so every way of reaching it gives the same class."""
    keywords = [p.name for p in engine_keywords(engine)] + list(TRLX_KEYWORDS) + ["train_mode"]

    def __init__(self, config, *args, train_mode=True, **kwargs):
        if args:
            raise TypeError(f"{name}: pass the arguments after config by keyword ({', '.join(keywords)}); "
                            f"got {len(args)} positional")
        if requires is not None:
            requires(f"train.trainer: {name}")
        self.train_mode = train_mode  # trlX's flag; the loop trains whenever learn() is called
        super(cls, self).__init__(config, **kwargs)

    K = inspect.Parameter.KEYWORD_ONLY
    __init__.__signature__ = inspect.Signature([
        inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        inspect.Parameter("config", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        *(inspect.Parameter(k, K, default=None) for k in TRLX_KEYWORDS),
        inspect.Parameter("train_mode", K, default=True),
        *engine_keywords(engine),
        inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD),
    ])
    cls = type(name, (trainer,), {
        "__init__": __init__,
        "__module__": __name__,
        "__qualname__": name,
        "__doc__": f"{trainer.__name__} on {getattr(engine, '__name__', engine)} under trlX's name "
                   f"(rlkit_core.pairing).\n\n{trainer.__doc__ or ''}".rstrip(),
        "engine_class": engine,
    })
    return cls


def module_getattr(backend: str, module: str) -> Callable[[str], type]:
    """A module ``__getattr__`` that imports ``backend``'s pairs by name (trlX's import paths:
    ``from rlkit_accelerate.trainers import AcceleratePPOTrainer``), for every installed method."""

    def __getattr__(name: str) -> type:
        from rlkit_core.plugins import get_registry
        from rlkit_core.registry import load_target

        spec = get_registry().find("trainer", name) if name.endswith("Trainer") else None
        if spec is None or (spec.backend or "").lower() != backend or spec.name != name:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        return load_target(spec.target, what=f"trainer {name!r}")

    return __getattr__


def __getattr__(name: str) -> type:
    """``rlkit_core.pairing.<Pair>``: where a pair's class says it lives (its ``__module__``),
    so that it pickles and its repr names a real import path."""
    spec = None
    if name.endswith("Trainer"):
        from rlkit_core.plugins import get_registry

        spec = get_registry().find("trainer", name)
    if spec is None or not isinstance(spec.target, Pairing) or spec.name != name:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return spec.target.load()
