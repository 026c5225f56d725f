"""The ``dataset`` source: prompts or samples from HF ``datasets`` (``rlkit-methods[datasets]``).

``data.prompts: {pipeline: dataset, kwargs: {path: reviews.parquet, split: train, column: text}}``

``path`` is a local file (``.json``/``.jsonl``, ``.csv``, ``.parquet``, ``.arrow``), a folder
written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``, a folder of such files, or
a dataset name (which needs the hub, or its copy in the HF cache with ``HF_DATASETS_OFFLINE=1``).
Each row's ``column`` is an item; with ``reward_column`` in the row the item is
``{"sample": ..., "reward": ...}`` (ILQL), as the file source does. ``n`` keeps the first n rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlkit_core.errors import ConfigError
from rlkit_methods.data.sources import _pick, _reward

BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet", ".arrow": "arrow"}


def _load(path: str, split: str, name: str | None, load_kwargs: dict[str, Any]):
    try:
        import datasets
    except ImportError:
        raise ConfigError("pipeline 'dataset' needs HF datasets; pip install 'rlkit-methods[datasets]'") from None
    local = Path(path).expanduser()
    if local.is_file():
        builder = BUILDERS.get(local.suffix.lower())
        if builder is None:
            raise ConfigError(f"dataset {path!r}: unknown file type {local.suffix!r}; use one of {', '.join(BUILDERS)}")
        loaded = datasets.load_dataset(builder, data_files={split: str(local)}, split=split, **load_kwargs)
    elif local.is_dir() and ((local / "dataset_info.json").is_file() or (local / "dataset_dict.json").is_file()):
        loaded = datasets.load_from_disk(str(local))  # save_to_disk's Arrow folder
        if isinstance(loaded, datasets.DatasetDict):
            if split not in loaded:
                raise ConfigError(f"dataset {path!r}: no split {split!r}; found {', '.join(loaded)}")
            loaded = loaded[split]
    else:
        loaded = datasets.load_dataset(str(local) if local.is_dir() else path, name, split=split, **load_kwargs)
    return loaded


def dataset_source(path: str, split: str = "train", column: str | None = None, reward_column: str = "reward",
                   n: int | None = None, name: str | None = None, **load_kwargs: Any) -> list[Any]:
    """The items of ``column`` (default: sample, prompt or text), with rewards when the rows have them."""
    loaded = _load(str(path), split, name, load_kwargs)
    where = f"dataset {str(path)!r}"
    try:  # the file source's rules: the same default columns, the same reward checks
        key = _pick(dict.fromkeys(loaded.column_names), column, where, "column")
        if n is not None:
            loaded = loaded.select(range(min(int(n), len(loaded))))
        if reward_column not in loaded.column_names:
            return list(loaded[key])
        return [{"sample": item, "reward": _reward(reward, f"{where}: row {i}")}
                for i, (item, reward) in enumerate(zip(loaded[key], loaded[reward_column]))]
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
