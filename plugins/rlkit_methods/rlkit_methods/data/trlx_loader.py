"""trlX's ``create_loader`` on rlkit's stores and prompt pipeline: compatibility only.

rlkit's loop never calls it (it batches with :mod:`rlkit_methods.loop.batching` and each
store's ``collate``); trlX's code and tests built their loaders with it. One definition for
every store, with each store's trlX defaults as class attributes.
"""

from __future__ import annotations

import os
from typing import Any


class TrlxLoader:
    """``create_loader(batch_size, shuffle, drop_last, **kwargs)``: a ``DataLoader`` over the
    store with its ``collate``. ``loader_shuffle``: trlX's default ``shuffle``;
    ``loader_drop_last``: ``"several processes"`` drops the last batch when torchrun started
    several (trlX's ILQL loaders did), otherwise the default ``drop_last``."""

    loader_shuffle: bool = False
    loader_drop_last: bool | str = False

    def create_loader(self, batch_size: int, shuffle: bool | None = None, drop_last: bool | None = None, **kwargs: Any):
        from torch.utils.data import DataLoader

        if drop_last is None:
            drop_last = self.loader_drop_last
            if drop_last == "several processes":
                drop_last = int(os.environ.get("WORLD_SIZE", "1")) > 1
        shuffle = self.loader_shuffle if shuffle is None else shuffle
        return DataLoader(self, batch_size=batch_size, shuffle=shuffle, collate_fn=self.collate, drop_last=drop_last, **kwargs)
