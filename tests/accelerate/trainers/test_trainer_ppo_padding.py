"""PPO's first ratio is 1: before any update, the log-probs of a training batch equal the ones
stored at rollout time, for causal and seq2seq policies and either tokenizer padding side
(with padding_side: right the causal store right-padded the prompts and read the first
response token's log-prob at a pad position: 0.22 off on the walks)."""

import pytest
import torch

import t5_walks_setup
import walks_setup
from rlkit_accelerate.trainers import AcceleratePPOTrainer
from rlkit_methods.common.stats import logprobs_of_labels
from rlkit_methods.data.prompts import PromptPipeline


@pytest.mark.parametrize("setup", [walks_setup, t5_walks_setup], ids=["causal", "seq2seq"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_training_logprobs_equal_the_rollout_logprobs_before_an_update(setup, side, tmp_path):
    config = setup.config("ppo", tmp_path, tokenizer=dict(padding_side=side))
    trainer = AcceleratePPOTrainer(config, reward_fn=walks_setup.reward_fn)
    seq2seq = config.model.model_arch_type == "seq2seq"
    trainer.add_prompt_pipeline(PromptPipeline(["b", "cd", "efg", "h"] * 4, 6, trainer.tokenizer, add_special_tokens=seq2seq))
    trainer.make_experience(16)
    batch = trainer.store.collate([trainer.store[i] for i in range(8)])
    assert batch.query_tensors.shape[1] > 2  # prompts of different lengths: there is padding
    Q = batch.query_tensors.shape[1]
    trainer.model.eval()
    with torch.no_grad():
        out = trainer.model(input_ids=batch.query_tensors, attention_mask=batch.attention_mask[:, :Q],
                            response_ids=batch.response_tensors, response_mask=batch.response_mask)
    logprobs = logprobs_of_labels(out.logits, batch.response_tensors)
    mask = batch.response_mask.bool()
    assert torch.allclose(logprobs[mask], batch.logprobs[mask], atol=1e-5)
