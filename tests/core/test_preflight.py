"""`rlkit config validate` catches what a run would refuse before a model is loaded, and
`trust_remote_code` is only ever switched on at the top of the model section (issue 16, item 5)."""

import pytest
import yaml

from rlkit_core import PluginError, TRLConfig, hookimpl
from rlkit_core.cli import main
from rlkit_core.errors import ConfigError
from rlkit_core.testing import config_dict


def validate(capsys, tmp_path, *sets, data=None):
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(data or config_dict(reward="constant")))
    code = main(["config", "validate", str(path), *[arg for s in sets for arg in ("--set", s)]])
    return code, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


@pytest.mark.parametrize(
    "sets, expected",
    [
        (["method.gen_kwargs.max_new_tokens=-5"], "error: method.gen_kwargs.max_new_tokens: must be a whole number > 0, got -5"),
        (["method.gen_kwargs.max_new_tokens=0"], "error: method.gen_kwargs.max_new_tokens: must be a whole number > 0, got 0"),
        (["method.gen_kwargs.max_new_tokens=[2, -1]"], "error: method.gen_kwargs.max_new_tokens: must be a whole number > 0, got -1"),
        (["train.seq_length=4"], "error: train.seq_length: 4 leaves no room for prompts after max_new_tokens=4; raise seq_length or lower max_new_tokens"),
        (["method.gen_kwargs.max_new_tokens=[4, 64]"], "error: train.seq_length: 16 leaves no room for prompts after max_new_tokens=64"),
        (["train.batch_size=1000000000"], "error: train.batch_size: 1000000000 sequences per step and process fit no device (at most 1048576); lower it"),
        (["train.batch_size=1048576", "train.seq_length=4096"], "tokens in one forward pass fit no device; set train.minibatch_size"),
        (["train.minibatch_size=8", "train.batch_size=4"], "error: train.minibatch_size: 8 is larger than train.batch_size 4"),
    ],
)
def test_validate_refuses_values_a_run_would_refuse_or_get_wrong(fake_host, capsys, tmp_path, sets, expected):
    data = config_dict(reward="constant")
    data["train"]["seq_length"] = 16
    code, lines = validate(capsys, tmp_path, *sets, data=data)
    assert code == 2 and len(lines) == 1 and expected in lines[0] and lines[0].startswith("error: "), lines


def test_a_tracker_that_is_not_installed(fake_host, capsys, tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    code, lines = validate(capsys, tmp_path, "train.tracker=wandb")
    assert code == 2 and lines == ["error: train.tracker: wandb is not installed; pip install wandb, or set train.tracker: null"]


def test_trust_remote_code_only_at_the_top_of_the_model_section(fake_host, capsys, tmp_path):
    code, lines = validate(capsys, tmp_path, "model.model_extra_configs.trust_remote_code=true")
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith("error: model.model_extra_configs: trust_remote_code: true runs Python code shipped with the model")
    assert "model.trust_remote_code: true" in lines[0]
    code, lines = validate(capsys, tmp_path, "tokenizer.tokenizer_extra_configs.trust_remote_code=true")
    assert code == 2 and "tokenizer_extra_configs.trust_remote_code: true runs Python code" in lines[0]
    code, lines = validate(capsys, tmp_path, "model.trust_remote_code=true", "model.model_extra_configs.trust_remote_code=true")
    assert code == 0 and lines[0].startswith("warning: model.trust_remote_code: true runs Python code shipped with")
    with pytest.raises(ConfigError, match="model.model_extra_configs: trust_remote_code"):
        TRLConfig.from_dict(config_dict(model={"model_path": "m", "model_extra_configs": {"trust_remote_code": True}}))


def test_a_check_returning_garbage_names_the_plugin(fake_host, register_plugin, capsys, tmp_path):
    class Sloppy:
        @hookimpl
        def rlkit_check_config(self):
            return "everything is fine"

    register_plugin(Sloppy(), "sloppy")
    code, lines = validate(capsys, tmp_path)
    assert code == 1 and lines == ["error: plugin 'sloppy': rlkit_check_config must return a list of strings, got str"]


def test_a_good_config_still_validates(fake_host, capsys, tmp_path):
    code, lines = validate(capsys, tmp_path)
    assert code == 0 and lines[0].startswith("ok:")


def test_a_reward_function_whose_module_does_not_exist(fake_host, capsys, tmp_path):
    data = config_dict()
    data["reward"] = {"function": "my_rewadrs:score"}
    code, lines = validate(capsys, tmp_path, data=data)
    assert code == 2 and lines == ["error: reward.function: module 'my_rewadrs' not found (from 'my_rewadrs:score'); "
                                   "check the name, or make it importable (PYTHONPATH, pip install)"]


@pytest.mark.parametrize(
    "sections, expected",
    [
        ({"method": {"gen_kwargs": {"max_new_tokens": -5}}}, "method.gen_kwargs.max_new_tokens: must be a whole number > 0, got -5"),
        ({"train": {"batch_size": 10**9}}, "train.batch_size: 1000000000 sequences per step and process fit no device"),
        ({"train": {"minibatch_size": 8, "batch_size": 4}}, "train.minibatch_size: 8 is larger than train.batch_size 4"),
    ],
    ids=["negative max_new_tokens", "huge batch_size", "minibatch > batch"],
)
def test_train_refuses_what_validate_refuses_before_building_a_trainer(fake_host, capsys, tmp_path, monkeypatch, sections, expected):
    from rlkit_core import train
    from rlkit_core.testing import FakeTrainer, constant_reward

    built = []
    monkeypatch.setattr(FakeTrainer, "__init__", lambda self, **kwargs: built.append(kwargs))
    data = config_dict(reward="constant")
    for name, values in sections.items():
        data[name].update(values)
    with pytest.raises(ConfigError) as error:
        train(reward_fn=constant_reward(), prompts=["a"], config=TRLConfig.from_dict(data))
    assert error.value.errors[0].startswith(expected) and not built  # refused before a trainer (a model) is built
    code, lines = validate(capsys, tmp_path, data=data)
    assert code == 2 and lines == [f"error: {line}" for line in error.value.errors]  # the same lines as validate


def test_trust_remote_code_warns_once_from_train_and_from_rlkit_run(fake_host, capsys, tmp_path):
    import logging

    from rlkit_core import train
    from rlkit_core.testing import constant_reward

    data = config_dict(reward="constant", model={"model_path": "fake-model", "trust_remote_code": True,
                                                 "model_extra_configs": {"trust_remote_code": True}})
    records = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    logger = logging.getLogger("rlkit_core.preflight")  # its own handler: `rlkit run` stops propagation to the root
    logger.addHandler(handler)
    try:
        trainer = train(reward_fn=constant_reward(), prompts=["a"], config=TRLConfig.from_dict(data))
    finally:
        logger.removeHandler(handler)
    assert trainer.steps == 4
    assert [r.getMessage()[:60] for r in records] == ["model.trust_remote_code: true runs Python code shipped with "]
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(data))
    capsys.readouterr()
    assert main(["run", str(path)]) == 0
    shown = [line for line in capsys.readouterr().err.splitlines() if "trust_remote_code" in line]
    assert len(shown) == 1 and shown[0].startswith("warning: model.trust_remote_code: true"), shown  # not again from train()
