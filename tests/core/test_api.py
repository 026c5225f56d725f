"""train(): trlX's dispatch, trainer resolution and per-run plugins, with fake trainers."""

import attrs
import pytest

from rlkit_core import ConfigError, RegistryError, TRLConfig, hookimpl, train
from rlkit_core.testing import FakePlugin, FakeTrainer, RecordingObserver, config_dict


def _config(**sections):
    return TRLConfig.from_dict(config_dict(**sections))


def test_online_dispatch_feeds_prompts_and_runs_rollouts(fake_host):
    reward = lambda samples, **kw: [1.0] * len(samples)  # noqa: E731
    trainer = train(reward_fn=reward, prompts=["a", "b", "c"], config=_config())
    assert isinstance(trainer, FakeTrainer)
    assert trainer.prompt_pipeline.prompts == ["a", "b", "c"]
    assert trainer.experience == (4,)  # make_experience(method.num_rollouts)
    assert trainer.eval_pipeline.prompts == ["a", "b"]  # prompts[:batch_size]
    assert trainer.prompt_pipeline.max_prompt_length == 32 - 4  # seq_length - max_new_tokens
    assert trainer.steps == 4 and trainer.reward_fn is reward


def test_online_without_prompts_uses_bos_tokens(fake_host):
    trainer = train(reward_fn=lambda samples, **kw: [0.0] * len(samples), config=_config())
    assert trainer.prompt_pipeline.prompts == ["<s>", "<s>"]


def test_offline_and_supervised_dispatch(rlkit_bare_host):
    rlkit_bare_host.register(FakePlugin(mode="offline"), "offline-fakes")
    trainer = train(samples=["x", "y"], rewards=[1.0, 0.0], config=_config())
    assert trainer.experience == (["x", "y"], [1.0, 0.0], 32)
    assert trainer.eval_pipeline.prompts == ["<s>", "<s>"]

    rlkit_bare_host.unregister("offline-fakes")
    rlkit_bare_host.register(FakePlugin(mode="supervised"), "sft-fakes")
    trainer = train(samples=["x", "y"], eval_prompts=["q"], config=_config())
    assert trainer.experience == (["x", "y"], 32)
    assert trainer.eval_pipeline.prompts == ["q"]


def test_model_path_argument_overrides_the_config(fake_host):
    trainer = train(model_path="elsewhere", reward_fn=lambda samples, **kw: [0.0] * len(samples), config=_config())
    assert trainer.config.model.model_path == "elsewhere"


def test_samples_and_rewards_of_different_lengths_fail(rlkit_bare_host):
    rlkit_bare_host.register(FakePlugin(mode="offline"), "offline-fakes")
    with pytest.raises(ConfigError, match="got 1 rewards for 2 samples"):
        train(samples=["x", "y"], rewards=[1.0], config=_config())


def test_arguments_that_do_not_fit_the_method_fail_clearly(fake_host):
    with pytest.raises(ConfigError, match="fake trains online from reward_fn and prompts, but train\\(\\) got samples"):
        train(samples=["x"], rewards=[1.0], config=_config())
    with pytest.raises(ConfigError, match="give reward_fn"):
        train(config=_config())


def test_no_trainer_names_method_backend_and_what_is_installed(fake_host):
    with pytest.raises(RegistryError) as info:
        train(reward_fn=lambda **kw: [], config=_config(trainer="AccelerateFakeTrainer"))
    assert str(info.value).startswith("no trainer for method fake on backend accelerate")
    assert "installed trainers: FakeTrainer (fake/fake)" in str(info.value)


def test_trainer_for_another_method_is_a_config_error(fake_host, register_plugin):
    from rlkit_core import BackendSpec, MethodSpec, TrainerSpec
    from rlkit_core.testing import FakeMethodConfig

    class Other:
        @hookimpl
        def rlkit_register_methods(self):
            return [MethodSpec("other", FakeMethodConfig, mode="online")]

        @hookimpl
        def rlkit_register_backends(self):
            return [BackendSpec("fake2", trainers=[TrainerSpec("OtherTrainer", FakeTrainer, method="other")])]

    register_plugin(Other())
    with pytest.raises(ConfigError, match="OtherTrainer trains other, but method.name selects fake; use one of: FakeTrainer"):
        train(reward_fn=lambda **kw: [], config=_config(trainer="OtherTrainer"))


def test_default_config_comes_from_the_installed_method(fake_host):
    with pytest.raises(RegistryError, match="no method for online training is installed"):
        train(reward_fn=lambda **kw: [])


def test_per_run_plugins_observe_the_run_and_are_removed_after(fake_host):
    observer = RecordingObserver()
    trainer = train(reward_fn=lambda samples, **kw: [2.0] * len(samples), config=_config(), plugins=[observer])
    names = observer.names()
    assert names[0] == "rlkit_rollouts_made" and names[1] == "rlkit_train_start" and names[-1] == "rlkit_train_end"
    steps = [kw for name, kw in observer.calls if name == "rlkit_step_end"]
    assert [s["step"] for s in steps] == [1, 2, 3, 4]
    assert steps[0]["metrics"]["reward/mean"] == 2.0
    assert observer.calls[-1][1]["error"] is None
    assert [kw["step"] for name, kw in observer.calls if name == "rlkit_evaluation_end"] == [2, 4]
    assert all(s.source != "run" for s in fake_host.statuses.values())
    # the observer is gone: a second run does not call it
    before = len(observer.calls)
    train(reward_fn=lambda samples, **kw: [0.0] * len(samples), config=_config())
    assert len(observer.calls) == before and trainer.steps == 4


def test_train_end_receives_the_error_and_it_is_reraised(fake_host, monkeypatch):
    observer = RecordingObserver()

    def explode(self):
        raise RuntimeError("diverged")

    monkeypatch.setattr(FakeTrainer, "learn", explode)
    with pytest.raises(RuntimeError, match="diverged"):
        train(reward_fn=lambda **kw: [], config=_config(), plugins=[observer])
    name, kwargs = observer.calls[-1]
    assert name == "rlkit_train_end" and str(kwargs["error"]) == "diverged"


def test_sequence_budget_must_leave_room_for_prompts(fake_host):
    config = _config().evolve(method={"gen_kwargs": {"max_new_tokens": 32}})
    with pytest.raises(ConfigError, match="train.seq_length: 32 leaves no room"):
        train(reward_fn=lambda **kw: [], config=config)


def test_trainer_kwargs_and_logit_mask_reach_the_trainer(fake_host):
    config = _config(train={"trainer_kwargs": {"extra": 1}})
    trainer = train(reward_fn=lambda samples, **kw: [0.0] * len(samples), config=config, logit_mask=[[True]])
    assert trainer.trainer_kwargs == {"extra": 1} and trainer.logit_mask == [[True]]
    assert attrs.has(type(trainer.config))


def test_an_empty_prompt_list_is_an_error_not_bos_prompts(fake_host):
    with pytest.raises(ConfigError, match="prompts: the list is empty"):
        train(reward_fn=lambda **kw: [], prompts=[], config=_config())
