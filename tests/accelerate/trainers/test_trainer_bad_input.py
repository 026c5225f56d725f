"""Bad input to the accelerate trainers: one clear error, nothing lost."""

import pytest
from transformers import PreTrainedTokenizerFast

from rlkit_methods.run.checkpoint import is_complete, latest_checkpoint
from rlkit_core.errors import ConfigError, RlkitError
from walks_setup import config, reward_fn, run

import rlkit_core as rlkit


def test_a_model_path_that_does_not_exist(tmp_path):
    c = config("sft", tmp_path)
    c.model.model_path = str(tmp_path / "no-such-model")
    with pytest.raises(RlkitError, match="no-such-model'?: no such folder"):
        rlkit.train(samples=["ab"], config=c)


def test_seq_length_smaller_than_max_new_tokens_fails_before_loading(tmp_path):
    c = config("ppo", tmp_path, train=dict(seq_length=4))
    c.model.model_path = str(tmp_path / "never-loaded")  # the check comes first
    with pytest.raises(ConfigError, match="train.seq_length: 4 leaves no room .*max_new_tokens=6"):
        rlkit.train(reward_fn=reward_fn, prompts=["b"], config=c)


def test_an_empty_prompt_list(tmp_path):
    with pytest.raises(ConfigError, match="prompts: the list is empty"):
        run("ppo", tmp_path, prompts=[])


@pytest.mark.slow
def test_a_tokenizer_without_pad_token_pads_with_eos(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {ch: i for i, ch in enumerate(["</s>", "<unk>"] + [chr(c) for c in range(ord("a"), ord("z") + 1)])}
    raw = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="</s>", unk_token="<unk>")
    assert tokenizer.pad_token is None
    c = config("sft", tmp_path, train=dict(total_steps=2))
    c.tokenizer.tokenizer_path = tokenizer
    c.model.model_path.vocab_size = len(vocab)
    trainer = rlkit.train(samples=["bcd", "ef"], eval_prompts=["b"], config=c)
    assert trainer.tokenizer.pad_token == "</s>" and trainer.iter_count == 2


@pytest.mark.slow
def test_a_failing_reward_names_the_function_and_step_and_keeps_the_last_checkpoint(tmp_path):
    calls = {"n": 0}

    def flaky_reward(samples, **kwargs):
        calls["n"] += 1
        if calls["n"] > 3:  # rollouts (2 chunks) and the first evaluation succeed
            raise ValueError("reward server unreachable")
        return reward_fn(samples)

    with pytest.raises(RlkitError, match=r"reward function .*flaky_reward failed at step 4: ValueError: reward server unreachable"):
        run("ppo", tmp_path, reward_fn=flaky_reward, config_overrides=dict(train=dict(total_steps=8, checkpoint_interval=2)))
    ckpts = tmp_path / "ckpts"
    assert latest_checkpoint(ckpts) == ckpts / "checkpoint_4" and is_complete(ckpts / "checkpoint_2")
    resumed = run("ppo", tmp_path, config_overrides=dict(train=dict(total_steps=8, checkpoint_interval=2, resume_from_checkpoint=str(ckpts))))
    assert resumed.iter_count == 8


def test_a_reward_returning_the_wrong_count_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="returned 1 scores for 8 samples"):
        run("ppo", tmp_path, reward_fn=lambda samples, **kw: [0.0])


def test_unknown_trainer_kwargs_are_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="trainer_kwargs: the accelerate engine does not accept bogus"):
        run("sft", tmp_path, config_overrides=dict(train=dict(trainer_kwargs=dict(bogus=1))))


def test_a_tracker_that_is_not_installed(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ConfigError, match="train.tracker: wandb is not installed"):
        run("sft", tmp_path, config_overrides=dict(train=dict(tracker="wandb")))
