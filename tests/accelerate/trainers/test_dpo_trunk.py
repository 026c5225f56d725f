"""DPO with the hydra reference runs the frozen trunk once per step: the reference's pass keeps
the trunk's hidden states and the training forward runs only the top (docs/benchmarks.md, the
dpo case). Training is exactly what running the trunk twice gives."""

import sys
from pathlib import Path

import pytest
import torch
from accelerate.state import AcceleratorState, GradientState
from transformers import LlamaConfig

sys.path.insert(0, str(Path(__file__).parent))
import prefs_setup  # noqa: E402
import walks_setup  # noqa: E402

from rlkit_accelerate.engine import AccelerateEngine  # noqa: E402
from rlkit_accelerate.models.policy import CausalLMWithValueHead  # noqa: E402

ORIGINAL_FORWARD = AccelerateEngine._forward


def llama_config(*args, **kwargs):  # no dropout anywhere: the trunk is the same every time
    return LlamaConfig(num_hidden_layers=3, hidden_size=32, intermediate_size=64, num_attention_heads=4,
                       num_key_value_heads=2, max_position_embeddings=64, vocab_size=len(walks_setup.TOKENIZER),
                       bos_token_id=1, eos_token_id=1, pad_token_id=0)


def train_dpo(tmp_path, monkeypatch, keep_trunk: bool):
    monkeypatch.setattr(prefs_setup, "model_config", llama_config)
    if not keep_trunk:  # the engine keeps no trunk: the training forward runs it again
        monkeypatch.setattr(CausalLMWithValueHead, "caches_trunk", lambda self: False)
    calls = {"train": 0, "trunk block in train": 0, "trunk block": 0}

    def counting_forward(self, kind, model, batch, want, *, train):
        first_block = self.unwrapped_model.layout.blocks[0]
        key = "trunk block in train" if train else "trunk block"
        handle = first_block.register_forward_hook(lambda *_: calls.__setitem__(key, calls[key] + 1))
        try:
            calls["train"] += int(train)
            return ORIGINAL_FORWARD(self, kind, model, batch, want, train=train)
        finally:
            handle.remove()

    monkeypatch.setattr(AccelerateEngine, "_forward", counting_forward)
    try:
        trainer = prefs_setup.run("dpo", tmp_path, config_overrides=dict(model=dict(num_layers_unfrozen=1),
                                                                         train=dict(total_steps=3, minibatch_size=4)))
    finally:
        AcceleratorState._reset_state(True)
        GradientState._reset_state()
    from rlkit_core.testing.engine import read_records

    losses = [r["loss"] for r in read_records(tmp_path) if r["kind"] == "train"]
    weights = {k: v.detach().clone() for k, v in trainer.engine.unwrapped_model.state_dict().items()}
    return losses, weights, calls


@pytest.mark.slow
def test_hydra_dpo_runs_the_trunk_once_per_step_and_trains_the_same(tmp_path, monkeypatch):
    kept_losses, kept_weights, kept = train_dpo(tmp_path / "kept", monkeypatch, keep_trunk=True)
    monkeypatch.undo()
    ran_losses, ran_weights, ran = train_dpo(tmp_path / "ran", monkeypatch, keep_trunk=False)
    assert kept["train"] == ran["train"] == 3 * 2  # 3 steps of 8 pairs, micro-batches of 4 pairs
    assert kept["trunk block in train"] == 0 and ran["trunk block in train"] == ran["train"]
    assert kept["trunk block"] == ran["trunk block"] == kept["train"]  # the reference's pass, once per micro-batch
    assert len(kept_losses) == 3 and kept_losses == pytest.approx(ran_losses, abs=1e-6)
    for name, value in ran_weights.items():
        assert torch.allclose(kept_weights[name], value, atol=1e-6), name
