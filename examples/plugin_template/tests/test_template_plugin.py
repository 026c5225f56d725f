"""How a plugin author tests a plugin: conformance, the functions, and a run that uses them."""

import json
import logging

import pytest
import yaml

import rlkit_core as rlkit
import rlkit_plugin_template.plugin as plugin
from rlkit_core.cli import main
from rlkit_core.testing import FakePlugin, RecordingObserver, check_imports_no_torch, check_plugin, check_reward_fn, config_dict
from rlkit_plugin_template.rewards import keyword_count
from rlkit_plugin_template.sources import lines


def test_the_plugin_registers_cleanly():
    assert check_plugin(plugin) == {"pipeline": ["lines"], "reward": ["keyword_count"]}


def test_the_plugin_module_does_not_import_torch():
    check_imports_no_torch("rlkit_plugin_template.plugin")


def test_it_is_installed_through_its_entry_point(rlkit_host):
    status = rlkit_host.statuses["plugin_template"]
    assert (status.distribution, status.status) == ("rlkit-plugin-template", "loaded")
    assert rlkit_host.registry.get("reward", "keyword_count")


def test_rlkit_plugins_lists_it(rlkit_host, capsys):
    assert main(["plugins", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)["plugins"]}
    assert rows["plugin_template"]["status"] == "loaded"
    assert rows["plugin_template"]["provides"] == {"pipeline": ["lines"], "reward": ["keyword_count"]}


def test_keyword_count_follows_the_reward_contract():
    fn = keyword_count(keywords=["great", "fun"])
    scores = check_reward_fn(fn, samples=["a great fun film", "dull"], prompts=["a", "b"], outputs=[" great fun film", "dull"])
    assert scores == [2.0, 0.0]
    assert keyword_count(["Great"], case_sensitive=True)(samples=["great Great"]) == [1.0]
    assert keyword_count(["a"], cap=2)(samples=["aaaa"]) == [2.0]
    with pytest.raises(ValueError, match="non-empty list"):
        keyword_count(keywords="great")


def test_lines_source():
    assert lines(["x", "y"], prefix="> ", repeat=2) == ["> x", "> y", "> x", "> y"]
    assert len(lines()) == 4
    with pytest.raises(ValueError, match="empty"):
        lines([])


def test_a_config_selects_the_reward_and_the_source_for_a_run(rlkit_host, register_plugin):
    register_plugin(FakePlugin())  # a fake method and trainer: no model needed
    observer = register_plugin(RecordingObserver())
    config = rlkit.TRLConfig.from_dict(config_dict(
        reward={"name": "keyword_count", "kwargs": {"keywords": ["The"]}},
        data={"prompts": {"pipeline": "lines", "kwargs": {"repeat": 2}}},
    ))
    trainer = rlkit.train_from_config(config)
    assert len(trainer.prompt_pipeline) == 8  # the source's prompts reached the trainer
    # the configured reward, with its kwargs, is the one the trainer calls
    assert trainer.reward_fn(samples=["The The"], outputs=["The end. The"]) == [2.0]
    steps = [kw["metrics"] for name, kw in observer.calls if name == "rlkit_step_end"]
    assert len(steps) == 4 and steps[0]["reward/mean"] == 0.0  # FakeTrainer's outputs are empty


def test_the_observer_logs_evaluations_on_the_main_process_only(caplog):
    with caplog.at_level(logging.INFO, logger="rlkit_plugin_template"):
        plugin.rlkit_evaluation_end(step=3, metrics={"reward/mean": 0.5}, is_main_process=False)
        assert caplog.messages == []
        plugin.rlkit_evaluation_end(step=3, metrics={"reward/mean": 0.5}, is_main_process=True)
    assert caplog.messages == ["evaluation at step 3: reward/mean 0.500"]


class KeepTrainer:
    """A per-test observer that keeps the trainer a run built."""

    trainer = None

    @rlkit.hookimpl
    def rlkit_train_start(self, trainer):
        self.trainer = trainer


def test_rlkit_run_with_a_yaml_that_selects_them(rlkit_host, register_plugin, tmp_path):
    register_plugin(FakePlugin())
    kept = register_plugin(KeepTrainer())
    path = tmp_path / "run.yml"
    path.write_text(yaml.safe_dump(config_dict(reward={"name": "keyword_count"}, data={"prompts": {"pipeline": "lines"}})))
    assert main(["run", str(path), "--set", "reward.kwargs.keywords=[end]", "--set", "data.prompts.kwargs.prefix='> '"]) == 0
    assert kept.trainer.prompt_pipeline.prompts[:2] == ["> The movie was", "> I thought the acting"]
    assert kept.trainer.reward_fn(samples=["x"], outputs=["The End, the end"]) == [2.0]
    assert kept.trainer.steps == 4


def test_a_bad_reward_argument_is_a_config_error(rlkit_host, register_plugin, tmp_path, capsys):
    register_plugin(FakePlugin())
    path = tmp_path / "run.yml"
    path.write_text(yaml.safe_dump(config_dict(reward={"name": "keyword_count", "kwargs": {"words": ["x"]}})))
    assert main(["run", str(path)]) == 2
    assert "reward.kwargs.words: 'keyword_count' takes no such argument" in capsys.readouterr().err
