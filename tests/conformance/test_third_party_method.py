"""A method from a third-party distribution (entry point only) trains randomwalks on the
accelerate engine as ``AccelerateReinforceTrainer``, a name no plugin registers: the method's
trainer is paired with the backend's engine (rlkit_core.pairing). The NeMo engine
runs the same plugin in tests/nemo/megatron."""

import pytest
import sys
from pathlib import Path

import torch

from rlkit_core.plugins import PluginHost, set_host

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "accelerate" / "trainers"))
import walks_setup  # noqa: E402

pytestmark = pytest.mark.slow  # trains real runs (rlkit_core.testing.lanes)


def test_reinforce_from_a_plugin_distribution_trains_on_accelerate(tmp_path, fake_distribution):
    from accelerate.state import AcceleratorState, GradientState

    fake_distribution("rlkit-reinforce", {"reinforce": "rlkit_reinforce_test"},
                      {"rlkit_reinforce_test": (HERE / "reinforce_plugin.py").read_text()})
    previous = set_host(PluginHost())
    try:
        overrides = dict(train=dict(total_steps=8, trainer="AccelerateReinforceTrainer"), method=dict(name="reinforce", lam=1.0))
        trainer = walks_setup.run("ppo", tmp_path, config_overrides=overrides)
    finally:
        set_host(previous)
        AcceleratorState._reset_state(True)
        GradientState._reset_state()
    # the pair: its own class, named as trlX names trainers, over the method's trainer (rlkit_core.pairing)
    assert type(trainer).__name__ == "AccelerateReinforceTrainer" and type(trainer).__mro__[1].__name__ == "ReinforceTrainer"
    assert type(trainer.engine).__name__ == "AccelerateEngine"
    assert trainer.iter_count == 8
    from rlkit_methods.run.metrics_log import read_metrics

    train = [r for r in read_metrics(tmp_path / "ckpts" / "logs") if r["kind"] == "train"]
    assert len(train) == 8 and all(torch.isfinite(torch.tensor(r["losses/policy_loss"])) for r in train)
