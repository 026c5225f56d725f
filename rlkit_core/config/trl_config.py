"""``TRLConfig``: trlX's top-level config, validated strictly."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Mapping, Optional

import attrs
import yaml

from rlkit_core.config.converter import StructureErrors, converter, current_registry, expand_shorthands, to_plain
from rlkit_core.config.overrides import deep_merge, unflatten
from rlkit_core.config.schema import (
    ComponentConfig,
    DataConfig,
    MethodConfig,
    ModelConfig,
    OptimizerConfig,
    SchedulerConfig,
    TokenizerConfig,
    TrainConfig,
    remote_code_asked,
)
from rlkit_core.errors import ConfigError


class _class_or_instance_method:
    """``TRLConfig.update(base, overrides)`` as in trlX, and also ``config.update(overrides)``."""

    def __init__(self, func):
        self.func = func

    def __get__(self, instance, owner):
        if instance is None:
            return lambda base, overrides=None, **kw: self.func(owner, base, overrides, **kw)
        return lambda overrides, **kw: self.func(owner, instance, overrides, **kw)


@attrs.define
class TRLConfig:
    """The whole run: trlX's six sections plus rlkit's ``data``, ``reward`` and ``metric``."""

    method: MethodConfig
    model: ModelConfig
    optimizer: OptimizerConfig
    scheduler: SchedulerConfig
    tokenizer: TokenizerConfig
    train: TrainConfig
    data: DataConfig = attrs.Factory(DataConfig)
    reward: Optional[ComponentConfig] = None
    metric: Optional[ComponentConfig] = None

    def __attrs_post_init__(self) -> None:
        if attrs.validators.get_disabled():  # while structuring: checked after, with the path
            return
        if remote_code_asked(self.tokenizer.tokenizer_extra_configs) and not self.model.trust_remote_code:
            raise ValueError(
                "tokenizer: tokenizer_extra_configs.trust_remote_code: true runs Python code shipped with the "
                "tokenizer; allow it explicitly with model.trust_remote_code: true"
            )

    # reading -----------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, config: Mapping[str, Any], *, registry: Any = None) -> "TRLConfig":
        """Validate a plain dict; every problem is reported in one :class:`ConfigError`."""
        token = current_registry.set(registry) if registry is not None else None
        try:
            return converter.structure(config, cls)
        except StructureErrors as exc:
            raise ConfigError([f"{path or '<config>'}: {message}" for path, message in exc.lines]) from None
        finally:
            if token is not None:
                current_registry.reset(token)

    @classmethod
    def load_yaml(cls, path: str | os.PathLike, *, registry: Any = None) -> "TRLConfig":
        return cls.from_dict(read_yaml(path), registry=registry)

    # writing -----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return to_plain(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(_yaml_safe(self.to_dict()), sort_keys=False)

    def save_yaml(self, path: str | os.PathLike) -> None:
        Path(path).write_text(self.to_yaml())

    def __str__(self) -> str:
        return self.to_yaml()

    # changing ----------------------------------------------------------------------------

    def evolve(self, **kwargs: Any) -> "TRLConfig":
        """A new config with nested sections deep-merged: ``evolve(train=dict(seq_length=64))``."""
        return type(self).from_dict(deep_merge(self.to_dict(), kwargs))

    @_class_or_instance_method
    def update(cls, base: Any, overrides: Mapping[str, Any] | None = None, **kwargs: Any) -> "TRLConfig":
        """trlX's ``TRLConfig.update(base_dict, {"method.gamma": 0.9})``: dotted or nested keys.

        A key that does not exist in the schema is an error with a suggestion, never ignored.
        """
        overrides = dict(overrides or {}, **kwargs)
        base_dict = base.to_dict() if isinstance(base, TRLConfig) else dict(base)
        return cls.from_dict(deep_merge(expand_shorthands(base_dict), unflatten(overrides)))


def read_yaml(path: str | os.PathLike) -> dict[str, Any]:
    """Read a YAML config file, with a one-line error for a missing file or broken YAML."""
    path = Path(path)
    if path.exists() and not path.is_dir() and not path.is_file():
        raise ConfigError(f"{path}: not a regular file (a device or a pipe); pass the path of a YAML file")
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found; pass the path of a YAML file")
    try:
        data = yaml.load(_config_text(path), Loader=_StrictLoader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}: invalid YAML: {where}{problem}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of sections (train, model, method, ...), got {type(data).__name__}")
    return data


MAX_DEPTH = 100  # a config nests a few levels; PyYAML's composer recurses once per level
MAX_NODES = 100_000  # values after aliases are expanded: a config holds hundreds


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping is an error (plain
    YAML keeps the last silently: ``lr`` set twice trains with the one you did not look at),
    nesting deeper than :data:`MAX_DEPTH` or aliases expanding past :data:`MAX_NODES` values
    (a "billion laughs" document grew ``rlkit config show`` to 6 GB) are errors, and ``3e-4``
    is a number as YAML 1.2 reads it (YAML 1.1 wants a dot: ``3.0e-4``)."""

    def compose_node(self, parent, index):
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(None, None, f"nested more than {MAX_DEPTH} levels deep; a config "
                                                  f"is a few levels of sections", self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_node(self):
        node = super().get_single_node()
        if node is not None and _expanded_size(node, {}) > MAX_NODES:
            raise yaml.composer.ComposerError(None, None, f"its aliases (*name) expand to more than {MAX_NODES} values; "
                                              f"write the values out, or use fewer aliases of aliases", node.start_mark)
        return node

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:  # the mapping's own keys, before ``<<`` merges are applied
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = (key_node.tag, key_node.value)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key_node.value!r} appears twice in one mapping (first on line {seen[key] + 1}); keep one",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789"))


def _expanded_size(node: Any, sizes: dict[int, int]) -> int:
    """How many values ``node`` stands for once every alias is copied out (each shared node
    is counted once per use, computed once)."""
    if id(node) in sizes:
        return sizes[id(node)]
    sizes[id(node)] = 1  # an alias cycle counts once
    if isinstance(node, yaml.SequenceNode):
        total = 1 + sum(_expanded_size(child, sizes) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        total = 1 + sum(_expanded_size(k, sizes) + _expanded_size(v, sizes) for k, v in node.value)
    else:
        total = 1
    sizes[id(node)] = min(total, MAX_NODES + 1)
    return sizes[id(node)]


MAX_BYTES = 16 << 20


def _config_text(path: Path) -> str:
    """The text of a config file: UTF-8, or UTF-16/32 with a byte-order mark (what some Windows
    editors save); anything else (a binary file) is one error naming the file."""
    import codecs

    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise ConfigError(f"{path}: {size / 2**20:.0f} MB, and a config is a few KB; pass the YAML config file")
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc.strerror or exc}") from None
    for bom, encoding in ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
                          (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16")):
        if raw.startswith(bom):
            break
    else:
        encoding = "utf-8"
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not a text file in UTF-8 (byte {raw[exc.start]:#04x} at offset {exc.start}); "
            f"save the config as UTF-8 YAML"
        ) from None
    if "\x00" in text:
        raise ConfigError(f"{path}: holds NUL bytes, so it is not a YAML text file; save the config as UTF-8 YAML")
    return text


def _yaml_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _yaml_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_yaml_safe(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if hasattr(value, "to_dict"):  # a transformers or peft config given from Python
        return _yaml_safe(value.to_dict())
    return repr(value)
