"""The config schema: trlX's ``TRLConfig`` sections with trlX's field names and defaults, plus
rlkit's ``data``, ``reward`` and ``metric`` sections that the CLI needs.

Range checks are attrs validators built from :mod:`rlkit_core.config.validators`; when a whole
config is structured they run after structuring so that all problems are reported together.
"""

from __future__ import annotations

import re
from typing import Any, Optional

import attrs

from rlkit_core.config.validators import at_least, exactly_one, file_suffix, module_attribute, one_of, positive

FILE_SUFFIXES = (".jsonl", ".csv", ".txt")


@attrs.define
class MethodConfig:
    """Base of every method section; ``name`` selects the method (case-insensitive)."""

    name: str


@attrs.define
class TrainConfig:
    total_steps: int = attrs.field(validator=positive)
    seq_length: int = attrs.field(validator=positive)
    epochs: int = attrs.field(validator=positive)
    batch_size: int = attrs.field(validator=positive)
    checkpoint_interval: int = attrs.field(validator=positive)
    eval_interval: int = attrs.field(validator=positive)
    pipeline: str = "PromptPipeline"
    trainer: str = "AcceleratePPOTrainer"
    trainer_kwargs: dict[str, Any] = attrs.Factory(dict)
    project_name: str = "trlx"
    run_name: Optional[str] = None
    entity_name: Optional[str] = None
    group_name: Optional[str] = None
    checkpoint_dir: str = "ckpts"
    rollout_logging_dir: Optional[str] = None
    save_best: bool = True
    save_optimizer: bool = True
    # rlkit: keep only the newest N checkpoint_<step> folders (best_checkpoint is never removed)
    save_total_limit: Optional[int] = attrs.field(default=None, validator=attrs.validators.optional(positive))
    resume_from_checkpoint: Optional[str] = None
    overwrite_checkpoint_dir: bool = False  # rlkit: replace another run's files in checkpoint_dir
    # trlX defaults to wandb; rlkit logs JSONL always and needs no account, so no tracker.
    tracker: Optional[str] = attrs.field(default=None, validator=one_of(None, "tensorboard", "wandb"))
    logging_dir: Optional[str] = None
    tags: Optional[list[str]] = attrs.Factory(list)
    seed: int = 1000
    minibatch_size: Optional[int] = attrs.field(default=None, validator=positive)
    # rlkit: fill each micro-batch up to this many real tokens instead of minibatch_size rows
    minibatch_tokens: Optional[int] = attrs.field(default=None, validator=attrs.validators.optional(positive))
    # rlkit: padding-free training forwards: a micro-batch's rows packed, each with its own positions
    packing: bool = False
    # rlkit additions
    backend: Optional[str] = None  # checked against the backend of ``trainer`` when set
    max_grad_norm: Optional[float] = attrs.field(default=None, validator=positive)  # off: trlX parity
    # stop at the first NaN/inf loss or gradient norm, keeping the last finite checkpoint
    stop_on_nonfinite: bool = True
    # a resume whose config differs from the checkpoint's in what changes the run is refused;
    # "allow" says the change is intended (e.g. a lower lr after a spike)
    resume_config_changes: str = attrs.field(default="refuse", validator=one_of("refuse", "allow"))
    generator: Optional[str] = None  # the sampler: null = the engine's own; a registered name (vllm); 'module:factory'
    generator_kwargs: dict[str, Any] = attrs.Factory(dict)  # the generator factory's keyword arguments
    # sample the next rollout phases while this one trains, from a policy at most max_staleness
    # phases old (methods that can learn off-policy: PPO, GRPO, RLOO; docs/architecture.md)
    async_rollouts: bool = False
    max_staleness: int = attrs.field(default=1, validator=positive)


@attrs.define
class ModelConfig:
    # a path, a hub-style name, a registered model source, or (Python API) a transformers config
    model_path: Any
    model_arch_type: str = attrs.field(default="causal", validator=one_of("causal", "seq2seq"))
    num_layers_unfrozen: int = attrs.field(default=-1, validator=at_least(-1))
    peft_config: Any = None
    model_extra_configs: dict[str, Any] = attrs.Factory(dict)
    # rlkit: running code shipped with a model is said here, at the top of the section, never
    # switched on from inside model_extra_configs alone
    trust_remote_code: bool = False

    def __attrs_post_init__(self) -> None:
        if attrs.validators.get_disabled():  # while structuring: checked after, with the path
            return
        if remote_code_asked(self.model_extra_configs) and not self.trust_remote_code:
            raise ValueError(
                "model_extra_configs: trust_remote_code: true runs Python code shipped with the model; "
                "allow it explicitly with model.trust_remote_code: true"
            )


def remote_code_asked(extra: Any) -> bool:
    return isinstance(extra, dict) and bool(extra.get("trust_remote_code"))


def chat_template_value(instance, attribute, value) -> None:
    if value is not None and not isinstance(value, (bool, str)):
        raise ValueError(f"{attribute.name}: must be true, false, null or a Jinja template string, got {value!r}")


@attrs.define
class TokenizerConfig:
    tokenizer_path: Any
    padding_side: str = attrs.field(default="left", validator=one_of("left", "right"))
    truncation_side: str = attrs.field(default="right", validator=one_of("left", "right"))
    tokenizer_extra_configs: dict[str, Any] = attrs.Factory(dict)
    # rlkit: wrap each prompt as a user turn of the tokenizer's chat template (true), or of this
    # Jinja template (a string), ending with the assistant's turn; for instruct models
    chat_template: Any = attrs.field(default=None, validator=chat_template_value)


_FLOAT = re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")


def numbers_in(kwargs: Any) -> Any:
    """``3e-4`` is a number: YAML 1.1 (and ``--set``) read it as a string without a dot."""
    if not isinstance(kwargs, dict):
        return kwargs
    return {k: float(v) if isinstance(v, str) and _FLOAT.match(v.strip()) else v for k, v in kwargs.items()}


@attrs.define
class OptimizerConfig:
    name: str
    kwargs: dict[str, Any] = attrs.field(factory=dict, converter=numbers_in)


@attrs.define
class SchedulerConfig:
    name: str
    kwargs: dict[str, Any] = attrs.field(factory=dict, converter=numbers_in)


@attrs.define
class SourceConfig:
    """Where prompts or samples come from: a registered source pipeline, a file, or the items
    themselves.

    In YAML a plain string is a shorthand: ``prompts.txt`` (a path ending in .jsonl, .csv or
    .txt) or ``imdb_prompts`` (a pipeline name); a list is the items (``eval_prompts: [a, b]``).
    """

    pipeline: Optional[str] = None
    path: Optional[str] = attrs.field(default=None, validator=file_suffix(FILE_SUFFIXES))
    kwargs: dict[str, Any] = attrs.Factory(dict)
    items: Optional[list[Any]] = None

    def __attrs_post_init__(self) -> None:
        exactly_one(self, "pipeline", "path", "items")
        if self.items is not None and self.kwargs:
            raise ValueError("kwargs: not used with items (the items are the data); remove them")
        if self.items is not None and not self.items:
            raise ValueError("items: the list is empty; give at least one item")


@attrs.define
class DataConfig:
    prompts: Optional[SourceConfig] = None
    eval_prompts: Optional[SourceConfig] = None
    samples: Optional[SourceConfig] = None


@attrs.define
class ComponentConfig:
    """A reward or metric: a registered name, or a Python ``module:function``.

    In YAML a plain string is a shorthand: ``vader`` (a name) or ``my_pkg.rewards:score``.
    """

    name: Optional[str] = None
    function: Optional[str] = attrs.field(default=None, validator=module_attribute)
    kwargs: dict[str, Any] = attrs.Factory(dict)

    def __attrs_post_init__(self) -> None:
        exactly_one(self, "name", "function")


SECTION_ORDER = ("method", "model", "optimizer", "scheduler", "tokenizer", "train", "data", "reward", "metric")
