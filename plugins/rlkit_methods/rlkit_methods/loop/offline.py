"""What the offline trainers (ILQL, SFT) share: one pass over a fixed store per epoch,
split over the data-parallel ranks."""

from __future__ import annotations

from rlkit_core.errors import ConfigError

from rlkit_methods.loop.trainer import RLTrainer


class OfflineTrainer(RLTrainer):
    store = None

    def prepare_learning(self) -> None:
        if not self.store:
            raise ConfigError("samples: nothing to train on; give at least one sample")
        train = self.config.train
        self.n_inner_epochs = 1
        self.total_steps = min(train.total_steps, train.epochs * self.steps_per_pass())
