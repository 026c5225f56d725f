"""File-backed data sources for the CLI (``data.prompts: prompts.txt`` -> ``file(path=...)``).

* ``.txt``: one item per non-empty line;
* ``.jsonl``: one JSON value per line: a string, a list (a dialogue), or an object whose
  ``field`` (default: ``sample``, else ``prompt``, else ``text``) is the item; an object with
  a ``prompt`` key and no ``sample`` key is kept whole, so its other keys reach the reward
  function;
* ``.csv``: a header row; ``column`` (default: ``sample``, ``prompt``, ``text`` or the first
  column) is the item.

When a row has ``reward_field`` / ``reward_column`` (default ``reward``) the item is
``{"sample": item, "reward": float}`` and the core splits samples from rewards.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any, Iterator

from rlkit_core.errors import ConfigError

DEFAULT_FIELDS = ("sample", "prompt", "text")


def _reward(value: Any, where: str) -> float:
    try:
        reward = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: reward {value!r} is not a number") from None
    if not math.isfinite(reward):
        raise ValueError(f"{where}: reward is {reward}; rewards must be finite")
    return reward


def _pick(row: dict, name: str | None, where: str, what: str) -> str:
    if name is not None:
        if name not in row:
            raise ValueError(f"{where}: no {what} {name!r}; found {', '.join(map(str, row))}")
        return name
    for candidate in DEFAULT_FIELDS:
        if candidate in row:
            return candidate
    raise ValueError(f"{where}: none of {', '.join(DEFAULT_FIELDS)} found; name one with {what}=...")


def read_text(path: Path) -> str:
    """A data file's text: UTF-8, or UTF-16/32 with a byte-order mark (what some editors save);
    anything else (a binary file) is one error naming the file."""
    import codecs

    raw = path.read_bytes()
    encoding = "utf-8"
    for bom, name in ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
                      (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16")):
        if raw.startswith(bom):
            encoding = name
            break
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not a text file in UTF-8 (byte {raw[exc.start]:#04x} at offset {exc.start}); "
                         f"save it as UTF-8 text") from None
    if "\x00" in text:
        raise ValueError(f"{path}: holds NUL bytes, so it is not a text file; save it as UTF-8 text")
    return text


def read_txt(path: Path) -> list[Any]:
    return [line.rstrip("\r\n") for line in read_text(path).splitlines() if line.strip()]


def jsonl_values(path: Path) -> Iterator[tuple[str, Any]]:
    """(``file:line``, parsed value) for each non-blank line; invalid JSON is one error naming
    the line (the ``ValueError`` is a :class:`ConfigError`, which callers may also catch)."""
    for lineno, line in enumerate(read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            yield where, json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where}: invalid JSON ({exc.msg})") from None


def read_jsonl(path: Path, field: str | None = None, reward_field: str = "reward") -> list[Any]:
    items: list[Any] = []
    for where, value in jsonl_values(path):
        if not isinstance(value, dict):
            items.append(value)
            continue
        if field is None and "prompt" in value and "sample" not in value and reward_field not in value:
            items.append(value)  # a prompt with metadata for the reward function
            continue
        item = value[_pick(value, field, where, "field")]
        items.append({"sample": item, "reward": _reward(value[reward_field], where)} if reward_field in value else item)
    return items


def read_csv(path: Path, column: str | None = None, reward_column: str = "reward") -> list[Any]:
    import io

    with io.StringIO(read_text(path), newline="") as handle:
        reader = csv.DictReader(handle)
        if not reader.fieldnames:
            raise ValueError(f"{path}: empty CSV; the first row must name the columns")
        if column is None and not any(c in reader.fieldnames for c in DEFAULT_FIELDS):
            column = reader.fieldnames[0]
        items: list[Any] = []
        for lineno, row in enumerate(reader, 2):
            where = f"{path}:{lineno}"
            item = row[_pick(row, column, where, "column")]
            if reward_column in row:
                items.append({"sample": item, "reward": _reward(row[reward_column], where)})
            else:
                items.append(item)
    return items


def file_source(
    path: str,
    field: str | None = None,
    column: str | None = None,
    reward_field: str = "reward",
    reward_column: str = "reward",
    limit: int | None = None,
) -> list[Any]:
    """Items from a ``.txt``, ``.jsonl`` or ``.csv`` file (dispatch on the suffix)."""
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"{path}: file not found")
    suffix = file.suffix.lower()
    if suffix == ".txt":
        items = read_txt(file)
    elif suffix == ".jsonl":
        items = read_jsonl(file, field or column, reward_field)
    elif suffix == ".csv":
        items = read_csv(file, column or field, reward_column)
    else:
        raise ValueError(f"{path}: unsupported file type {suffix!r}; use .txt, .jsonl or .csv")
    if not items:
        raise ValueError(f"{path}: no items found")
    return items[:limit] if limit is not None else items
