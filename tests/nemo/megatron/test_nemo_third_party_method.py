"""The third-party REINFORCE method (tests/conformance/reinforce_plugin.py), installed as its
own distribution with an entry point only, trains randomwalks on the NeMo engine as
``NeMoReinforceTrainer``: a name no plugin registers, paired from the method's trainer and
the backend's engine (the accelerate side is tests/conformance/test_third_party_method.py)."""

from pathlib import Path

import pytest

from rlkit_core.plugins import PluginHost, set_host

import nemo_walks

pytestmark = [pytest.mark.usefixtures("megatron_cpu"), pytest.mark.slow]
PLUGIN = Path(__file__).parents[2] / "conformance" / "reinforce_plugin.py"


def test_reinforce_from_a_plugin_distribution_trains_on_nemo(tmp_path, fake_distribution):
    from rlkit_methods.run.metrics_log import read_metrics

    fake_distribution("rlkit-reinforce", {"reinforce": "rlkit_reinforce_nemo"}, {"rlkit_reinforce_nemo": PLUGIN.read_text()})
    previous = set_host(PluginHost())
    try:
        overrides = dict(train=dict(total_steps=6, trainer="NeMoReinforceTrainer"), method=dict(name="reinforce", lam=1.0))
        trainer = nemo_walks.run("ppo", tmp_path, config_overrides=overrides)
    finally:
        set_host(previous)
    # the pair: its own class, named as trlX names trainers, over the method's trainer (rlkit_core.pairing)
    assert type(trainer).__name__ == "NeMoReinforceTrainer" and type(trainer).__mro__[1].__name__ == "ReinforceTrainer"
    assert type(trainer.engine).__name__ == "MegatronEngine"
    train = [r for r in read_metrics(tmp_path / "ckpts" / "logs") if r["kind"] == "train"]
    assert [r["step"] for r in train] == list(range(1, 7))
    assert all(abs(r["losses/policy_loss"]) < 1e6 for r in train)
