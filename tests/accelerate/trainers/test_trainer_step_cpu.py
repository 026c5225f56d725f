"""The accelerate engine logs each optimizer step's process CPU seconds (``cpu/step``), the
figure bench/example_settings.py reads: CPU the step burns counts, time it waits does not."""

from __future__ import annotations

import time

import torch

import prefs_setup
from test_trainer_packing import model_config
from rlkit_accelerate.trainers import AccelerateDPOTrainer

PAIRS = prefs_setup.walk_pairs(4)


def test_a_step_logs_its_cpu_seconds_not_its_waits(tmp_path):
    config = prefs_setup.config("dpo", tmp_path, train=dict(seq_length=48))
    config.model.model_path = model_config("gpt2")
    trainer = AccelerateDPOTrainer(config)
    trainer.make_experience(PAIRS, 48)
    trainer.prepare_learning()
    engine = trainer.engine
    forward = engine._forward

    def busy_then_idle(*args, **kwargs):
        start = time.process_time()
        while time.process_time() - start < 0.2:  # burns 0.2 CPU s
            pass
        time.sleep(1.0)  # waits without CPU
        return forward(*args, **kwargs)

    engine._forward = busy_then_idle
    # one thread: OpenMP workers spin-waiting on a loaded machine would add CPU the step did not ask for
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        stats = engine.step("response", [trainer.store[i] for i in range(len(PAIRS))], trainer.collate, trainer.loss)
    finally:
        torch.set_num_threads(threads)
    assert stats["time/forward"] >= 1.0
    assert 0.2 <= stats["cpu/step"] < 1.0  # the burn and the tiny model's step; a wall clock would read >= 1.0
