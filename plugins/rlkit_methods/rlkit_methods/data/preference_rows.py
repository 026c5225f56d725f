"""Sources of preference pairs and logged completions, with one-line errors for bad rows.

``data.samples: {pipeline: preference_pairs, kwargs: {path: pairs.jsonl}}`` (DPO, reward model)
``data.samples: {pipeline: logged_completions, kwargs: {path: logs.parquet}}`` (logged_pg)

``path`` is a ``.jsonl`` file, or anything the ``dataset`` source reads (``.parquet``,
``.csv``, ``.json``, ``.arrow``, a ``save_to_disk`` folder; needs ``rlkit-methods[datasets]``).
Rows are plain or chat-formatted, as TRL's preference and prompt-completion data sets:

* a pair: ``prompt``, ``chosen``, ``rejected`` as strings, or as lists of chat messages
  (``{"role", "content"}``) whose prompt the tokenizer's chat template renders; without
  ``prompt``, two conversations that differ in their last turns (their shared opening is the
  prompt); an optional ``margin`` (the reward model's margin);
* a logged row: ``prompt`` and ``completion`` (strings or messages) or ``messages`` (the last
  assistant turn is the completion), a finite ``reward``, optionally ``behaviour_logprobs``:
  the behaviour policy's log-prob of each completion token (their count is checked against
  the completion's tokens when the trainer tokenizes it).

Torch-free; the trainers' stores tokenize the rows (:mod:`rlkit_methods.data.completions`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from rlkit_core.errors import ConfigError
from rlkit_methods.data.sources import _reward, jsonl_values


def read_rows(path: str, split: str = "train", n: int | None = None, **load_kwargs: Any) -> list[tuple[str, dict]]:
    """(where, row) for each row: ``file.jsonl:line`` or ``dataset 'path': row i``."""
    file = Path(path).expanduser()
    rows: list[tuple[str, dict]] = []
    if file.suffix.lower() == ".jsonl" and file.is_file():
        for where, row in jsonl_values(file):
            if not isinstance(row, dict):
                raise ConfigError(f"{where}: a row must be a JSON object, got {type(row).__name__}")
            rows.append((where, row))
    else:
        if not file.exists():
            raise ConfigError(f"{path}: file not found")
        from rlkit_methods.data.hf_datasets import _load

        loaded = _load(str(path), split, None, load_kwargs)
        rows = [(f"dataset {str(path)!r}: row {i}", dict(row)) for i, row in enumerate(loaded)]
    if not rows:
        raise ConfigError(f"{path}: no rows found")
    return rows[:n] if n is not None else rows


def _is_messages(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) and "role" in m and "content" in m for m in value)


def _text_or_messages(row: dict, field: str, where: str, *, required: bool = True) -> Any:
    value = row.get(field)
    if value is None:
        if not required:
            return None
        found = ", ".join(k for k, v in row.items() if v is not None)
        raise ValueError(f"{where}: no {field!r} (found {found})")
    if isinstance(value, str):
        if not value.strip():
            raise ValueError(f"{where}: {field!r} is empty")
        return value
    if _is_messages(value):
        if not any(str(m["content"]).strip() for m in value):
            raise ValueError(f"{where}: {field!r} has no text in its messages")
        return [{"role": m["role"], "content": m["content"]} for m in value]
    if isinstance(value, list) and not value:
        raise ValueError(f"{where}: {field!r} is empty")
    raise ValueError(f"{where}: {field!r} must be a string or a list of {{role, content}} messages, got {type(value).__name__}")


def check_pair(row: dict, where: str, prompt_field: str = "prompt", chosen_field: str = "chosen",
               rejected_field: str = "rejected", margin_field: str = "margin") -> dict[str, Any]:
    """``{"prompt", "chosen", "rejected"}`` (plus ``"margin"`` when the row has one)."""
    chosen = _text_or_messages(row, chosen_field, where)
    rejected = _text_or_messages(row, rejected_field, where)
    prompt = _text_or_messages(row, prompt_field, where, required=False)
    if prompt is None and isinstance(chosen, list) and isinstance(rejected, list):
        shared = 0  # the implicit prompt: the turns both conversations open with
        while shared < min(len(chosen), len(rejected)) - 1 and chosen[shared] == rejected[shared]:
            shared += 1
        prompt, chosen, rejected = chosen[:shared], chosen[shared:], rejected[shared:]
    if isinstance(chosen, list) != isinstance(rejected, list) or (prompt and isinstance(prompt, list) != isinstance(chosen, list)):
        raise ValueError(f"{where}: {prompt_field!r}, {chosen_field!r} and {rejected_field!r} must all be strings or all chat messages")
    pair = {"prompt": prompt or "", "chosen": chosen, "rejected": rejected}
    if row.get(margin_field) is not None:
        pair["margin"] = _finite(row[margin_field], where, margin_field)
    return pair


def _finite(value: Any, where: str, field: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: {field!r} is {value!r}, not a number") from None
    if not math.isfinite(number):
        raise ValueError(f"{where}: {field!r} is {number}; it must be finite")
    return number


def check_logged(row: dict, where: str, prompt_field: str = "prompt", completion_field: str = "completion",
                 reward_field: str = "reward", behaviour_field: str = "behaviour_logprobs") -> dict[str, Any]:
    """``{"sample": {"prompt", "completion"[, "behaviour_logprobs"]}, "reward": r}``."""
    if row.get("messages") is not None and row.get(completion_field) is None:
        messages = _text_or_messages(row, "messages", where)
        if not isinstance(messages, list) or messages[-1]["role"] != "assistant":
            raise ValueError(f"{where}: 'messages' must end with the assistant's turn (the completion)")
        prompt, completion = messages[:-1], messages[-1:]
        if not str(completion[0]["content"]).strip():
            raise ValueError(f"{where}: the completion (last assistant message) is empty")
    else:
        completion = _text_or_messages(row, completion_field, where)
        prompt = _text_or_messages(row, prompt_field, where, required=False) or ""
    if reward_field not in row or row[reward_field] is None:
        raise ValueError(f"{where}: no {reward_field!r}; every logged row needs its reward")
    sample: dict[str, Any] = {"prompt": prompt, "completion": completion}
    behaviour = row.get(behaviour_field)
    if behaviour is not None:
        if not isinstance(behaviour, (list, tuple)) or not behaviour:
            raise ValueError(f"{where}: {behaviour_field!r} must be a non-empty list of log-probs, one per completion token")
        values = [_finite(v, where, behaviour_field) for v in behaviour]
        if any(v > 1e-6 for v in values):
            raise ValueError(f"{where}: {behaviour_field!r} holds a positive value; give log-probs (<= 0), not probabilities")
        sample["behaviour_logprobs"] = values
    return {"sample": sample, "reward": _reward(row[reward_field], where)}


def _checked(rows, check, **fields) -> list[dict]:
    try:
        return [check(row, where, **fields) for where, row in rows]
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def preference_pairs(path: str, split: str = "train", n: int | None = None, prompt_field: str = "prompt",
                     chosen_field: str = "chosen", rejected_field: str = "rejected", margin_field: str = "margin",
                     **load_kwargs: Any) -> list[dict]:
    """Preference pairs ``{"prompt", "chosen", "rejected"[, "margin"]}`` from a file or data set."""
    return _checked(read_rows(path, split, n, **load_kwargs), check_pair, prompt_field=prompt_field,
                    chosen_field=chosen_field, rejected_field=rejected_field, margin_field=margin_field)


def logged_completions(path: str, split: str = "train", n: int | None = None, prompt_field: str = "prompt",
                       completion_field: str = "completion", reward_field: str = "reward",
                       behaviour_field: str = "behaviour_logprobs", **load_kwargs: Any) -> list[dict]:
    """Logged rows as ``{"sample": {...}, "reward": r}`` (the core splits samples from rewards)."""
    items = _checked(read_rows(path, split, n, **load_kwargs), check_logged, prompt_field=prompt_field,
                     completion_field=completion_field, reward_field=reward_field, behaviour_field=behaviour_field)
    with_behaviour = sum("behaviour_logprobs" in item["sample"] for item in items)
    if 0 < with_behaviour < len(items):
        raise ConfigError(f"{path}: {with_behaviour} of {len(items)} rows have {behaviour_field!r}; give them for all rows or none")
    return items
