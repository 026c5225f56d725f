"""The frozen trunk's output kept from each rollout for its PPO epochs (the bench's largest
saving, docs/benchmarks.md): training is exactly what running the trunk every time gives,
the trunk's blocks do not run in the loss, and the cache is off where it would differ."""

import sys
from pathlib import Path

import peft
import pytest
import torch
from accelerate.state import AcceleratorState, GradientState
from transformers import LlamaConfig

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "models"))
import walks_setup  # noqa: E402
from tiny_models import build  # noqa: E402

from rlkit_accelerate.engine import AccelerateEngine  # noqa: E402
from rlkit_accelerate.models.policy import CausalLMWithValueHead  # noqa: E402
from rlkit_accelerate.trainers import AcceleratePPOTrainer  # noqa: E402


ORIGINAL_FORWARD = AccelerateEngine._forward


def llama_config(*args, **kwargs):  # no dropout anywhere: the trunk is the same every time
    return LlamaConfig(num_hidden_layers=3, hidden_size=32, intermediate_size=64, num_attention_heads=4,
                       num_key_value_heads=2, max_position_embeddings=64, vocab_size=len(walks_setup.TOKENIZER),
                       bos_token_id=1, eos_token_id=1, pad_token_id=0)


def train_ppo(tmp_path, monkeypatch, cache: bool):
    monkeypatch.setattr(walks_setup, "model_config", llama_config)
    monkeypatch.setattr(AcceleratePPOTrainer, "cache_trunk", cache)
    calls = {"loss": 0, "trunk block in loss": 0}

    def counting_forward(self, kind, model, batch, want, *, train):
        if not train:
            return ORIGINAL_FORWARD(self, kind, model, batch, want, train=train)
        first_block = self.unwrapped_model.layout.blocks[0]
        handle = first_block.register_forward_hook(lambda *_: calls.__setitem__("trunk block in loss", calls["trunk block in loss"] + 1))
        try:
            calls["loss"] += 1
            return ORIGINAL_FORWARD(self, kind, model, batch, want, train=train)
        finally:
            handle.remove()

    monkeypatch.setattr(AccelerateEngine, "_forward", counting_forward)
    try:
        trainer = walks_setup.run("ppo", tmp_path, config_overrides=dict(model=dict(num_layers_unfrozen=1), train=dict(total_steps=4, minibatch_size=4)))
    finally:
        AcceleratorState._reset_state(True)
        GradientState._reset_state()
    weights = {k: v.detach().clone() for k, v in trainer.unwrapped_model.state_dict().items()}
    return trainer, weights, calls


@pytest.mark.slow
def test_kept_trunk_trains_exactly_like_running_it(tmp_path, monkeypatch):
    kept, kept_weights, kept_calls = train_ppo(tmp_path / "kept", monkeypatch, cache=True)
    run, run_weights, run_calls = train_ppo(tmp_path / "run", monkeypatch, cache=False)
    assert kept.store.history[0].trunk is not None and run.store.history[0].trunk is None
    assert kept_calls["loss"] == run_calls["loss"] > 0
    assert kept_calls["trunk block in loss"] == 0 and run_calls["trunk block in loss"] == run_calls["loss"]
    for key, value in run_weights.items():
        torch.testing.assert_close(kept_weights[key], value, rtol=0, atol=1e-6, msg=key)


@pytest.mark.parametrize("arch, unfrozen, lora, expected", [
    ("llama", 1, False, True),
    ("llama", 0, False, True),
    ("llama", -1, False, False),  # every block trains: nothing frozen to keep
    ("gpt2", 1, False, False),  # dropout: training runs the trunk differently from the rollout
    ("llama", 1, True, False),  # adapters in every block
])
def test_trunk_is_kept_only_when_it_is_frozen_and_deterministic(arch, unfrozen, lora, expected):
    base = build(arch, 2)
    if lora:
        base = peft.get_peft_model(base, peft.LoraConfig(r=2, target_modules=["q_proj"]))
    assert CausalLMWithValueHead(base, num_layers_unfrozen=unfrozen).caches_trunk() is expected
