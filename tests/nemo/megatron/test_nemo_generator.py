"""The generator kit (rlkit_core.testing.generator) on the NeMo engine's default generator in one
process (TP=PP=DP=1), and a generator with its own weights kept in sync from Megatron's shards.
The accelerate engine runs the same checks in tests/conformance/test_accelerate_generator.py."""

import pytest

from rlkit_core.testing.engine import check_stop_sequences
from rlkit_core.testing.generator import (
    HFCopyGenerator,
    SkippedSync,
    check_export_generates_generated,
    check_generator_follows_updates,
    check_generator_logprobs,
    check_generator_protocol,
    check_generator_samples,
)

import nemo_walks

pytestmark = [pytest.mark.usefixtures("megatron_cpu"), pytest.mark.slow]  # trains real runs (rlkit_core.testing.lanes)
PROMPTS = ["a", "bcd", "ef"]


def run(method, folder, overrides=None, **train_kwargs):
    return nemo_walks.run(method, folder, config_overrides=overrides, **train_kwargs)


@pytest.mark.parametrize("method", ["ppo", "sft"])
def test_default_generator_samples_logprobs_and_export(method, tmp_path):
    trainer = run(method, tmp_path, overrides=dict(train=dict(total_steps=2)), stop_sequences=["##"])
    check_generator_protocol(trainer.generator)
    assert type(trainer.generator).__name__ == "NemoGenerator"
    samples = check_generator_samples(trainer, PROMPTS)
    assert samples.logprobs is not None and samples.version == 2
    check_generator_logprobs(trainer, PROMPTS)
    check_generator_logprobs(trainer, PROMPTS, use_cache=False)
    check_export_generates_generated(trainer, tmp_path / "export", PROMPTS)
    check_stop_sequences(trainer, "##")


def test_a_generator_with_its_own_weights_follows_every_step(tmp_path):
    trainer = run("ppo", tmp_path, overrides=dict(train=dict(total_steps=1)))
    assert check_generator_follows_updates(trainer, HFCopyGenerator(trainer.engine, tmp_path / "copy"), PROMPTS) < 1e-4


def test_a_skipped_sync_is_caught(tmp_path):
    trainer = run("ppo", tmp_path, overrides=dict(train=dict(total_steps=1)))
    stale = SkippedSync(HFCopyGenerator(trainer.engine, tmp_path / "copy"), skip_version=trainer.iter_count + 2)
    with pytest.raises(AssertionError, match="log-probs differ"):
        check_generator_follows_updates(trainer, stale, PROMPTS, steps=2)


def test_above_a_frozen_trunk_only_the_trained_block_and_final_norm_are_offered(tmp_path):
    """num_layers_unfrozen=1: after the first (full) sync a generator with its own weights gets
    the top block and the final norm only, equal to the whole model's, and still follows every step."""
    import torch

    trainer = run("ppo", tmp_path, overrides=dict(model=dict(num_layers_unfrozen=1), train=dict(total_steps=1)))
    everything = dict(trainer.engine.named_weights(trainable_only=False))
    trained = dict(trainer.engine.named_weights(trainable_only=True))
    assert set(trained) == {name for name in everything if ".h.1." in name or ".ln_f." in name}, sorted(trained)
    assert all(torch.equal(trained[name], everything[name]) for name in trained)
    assert check_generator_follows_updates(trainer, HFCopyGenerator(trainer.engine, tmp_path / "copy"), PROMPTS) < 1e-4
