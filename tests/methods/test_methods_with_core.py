"""The plugin's pieces fit the core: train() and train_from_config() feed our pipelines and
stores through a recording trainer registered for the test."""

import json

import pytest

import rlkit_core
from rlkit_core import BackendSpec, TrainerSpec, hookimpl
from rlkit_core.config import SourceConfig
from rlkit_core.run import train_from_config

from rlkit_methods import default_ilql_config, default_ppo_config, default_sft_config
from rlkit_methods.ilql.store import ILQLRolloutStorage, make_experience
from rlkit_methods.sft.store import SFTStore, make_sft_experience


@pytest.fixture
def recording_backend(methods_host, char_tokenizer):
    class RecordingTrainer:
        def __init__(self, config, reward_fn=None, metric_fn=None, stop_sequences=None, **kwargs):
            self.config, self.reward_fn, self.metric_fn = config, reward_fn, metric_fn
            self.tokenizer = char_tokenizer
            self.is_main_process = True
            self.store = self.prompt_pipeline = self.eval_pipeline = None

        def add_prompt_pipeline(self, pipeline):
            self.prompt_pipeline = pipeline

        def add_eval_pipeline(self, pipeline):
            self.eval_pipeline = pipeline

        def make_experience(self, *args):
            if len(args) == 3:
                self.store = make_experience(args[0], args[1], self.tokenizer, args[2])
            elif len(args) == 2:
                self.store = make_sft_experience(args[0], self.tokenizer, args[1])
            else:
                self.num_rollouts = args[0]

        def learn(self):
            self.learned = True

    class Backend:
        @hookimpl
        def rlkit_register_backends(self):
            return [BackendSpec("recording", trainers=[
                TrainerSpec("AcceleratePPOTrainer", RecordingTrainer, method="ppo"),
                TrainerSpec("AccelerateILQLTrainer", RecordingTrainer, method="ilql"),
                TrainerSpec("AccelerateSFTTrainer", RecordingTrainer, method="sft"),
            ])]

    methods_host.register(Backend(), "recording", source="test")
    return methods_host


def small(config, seq_length=64):
    return config.evolve(train=dict(seq_length=seq_length, batch_size=2))


def test_train_offline_builds_the_ilql_store(recording_backend):
    trainer = rlkit_core.train(samples=["ab", ["c", "d"]], rewards=[1.0, 0.0], config=small(default_ilql_config()))
    assert isinstance(trainer.store, ILQLRolloutStorage) and len(trainer.store) == 2
    assert trainer.learned and len(trainer.eval_pipeline) == 2


def test_train_supervised_builds_the_sft_store(recording_backend):
    trainer = rlkit_core.train(samples=["ab", "cd", "ef"], config=small(default_sft_config()))
    assert isinstance(trainer.store, SFTStore) and len(trainer.store) == 3


def test_train_online_uses_prompt_pipeline_with_prompt_budget(recording_backend):
    config = small(default_ppo_config(), 32).evolve(method=dict(gen_kwargs=dict(max_new_tokens=28)))
    with pytest.warns(UserWarning, match="longer than 4 tokens"):
        trainer = rlkit_core.train(reward_fn=lambda samples, **kw: [0.0] * len(samples),
                                   prompts=["abcdefgh", "ab"], config=config)
    assert [p["input_ids"] for p in trainer.prompt_pipeline] == [[100, 101, 102, 103], [100, 101]]
    assert trainer.num_rollouts == config.method.num_rollouts


def test_train_from_config_with_file_sources_and_builtin_reward(recording_backend, tmp_path):
    samples = tmp_path / "samples.jsonl"
    samples.write_text("\n".join(json.dumps({"sample": s, "reward": r}) for s, r in [("ab", 1), ("cd", 0)]))
    config = small(default_ilql_config())
    config = config.evolve(data=dict(samples={"path": str(samples)}), metric={"name": "randomwalks_metric"})
    trainer = train_from_config(config)
    assert len(trainer.store) == 2 and trainer.metric_fn(["sda"])["optimality"] == [1.0]

    ppo = small(default_ppo_config()).evolve(
        data=dict(prompts={"pipeline": "randomwalks_prompts"}), reward={"name": "randomwalks"})
    trainer = train_from_config(ppo)
    assert len(trainer.prompt_pipeline) == 20 and trainer.reward_fn(["sda", "zz"]) == [1.0, 0.0]
    assert isinstance(ppo.data.prompts, SourceConfig)
