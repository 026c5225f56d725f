"""trlX's trainer surface: a PPO trainer built without a reward function (trlX allowed it,
e.g. to load a checkpoint for inference) works until rollouts are asked for."""

import pytest
import torch
import transformers

from rlkit_core.errors import ConfigError
from rlkit_core.loading import get_trainer
from rlkit_methods import default_ppo_config


def test_ppo_trainer_without_reward_fn_generates_and_refuses_rollouts(tmp_path, rlkit_host):
    config = default_ppo_config().evolve(
        train=dict(seq_length=12, batch_size=4, checkpoint_dir=str(tmp_path / "ckpts")),
        model=dict(num_layers_unfrozen=1),
        tokenizer=dict(tokenizer_path="randomwalks"),
        method=dict(gen_kwargs=dict(max_new_tokens=4, do_sample=False)),
    )
    config.model.model_path = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=23, n_positions=16,
                                                      bos_token_id=21, eos_token_id=21, pad_token_id=22)
    trainer = get_trainer("AcceleratePPOTrainer")(config)
    ids = trainer.tokenizer(["b", "c"], return_tensors="pt", add_special_tokens=False)
    out = trainer.generate(ids["input_ids"], ids["attention_mask"])
    assert out.shape[0] == 2 and torch.equal(out[:, :1], ids["input_ids"])
    with pytest.raises(ConfigError, match="reward: PPO needs a reward function"):
        trainer.make_experience(8, verbose=True)  # trlX's signature, verbose included
