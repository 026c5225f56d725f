"""Discovery through entry points, one plugin at a time, as pip-installed plugins are found."""

import json

import pytest

from rlkit_core import PluginError, RegistryError, TRLConfig, register_datapipeline, register_method, register_trainer
from rlkit_core.cli import main
from rlkit_core.plugins import IN_PROCESS, PluginHost, set_host
from rlkit_core.testing import FakeMethodConfig, config_dict

THIRD_PARTY = """
import attrs
from rlkit_core import MethodSpec, RewardSpec, hookimpl
from rlkit_core.config import MethodConfig, positive


@attrs.define
class KTOConfig(MethodConfig):
    num_pairs: int = attrs.field(default=4, validator=positive)


@hookimpl
def rlkit_register_methods():
    return [MethodSpec("kto", KTOConfig, mode="offline", aliases=["KTOConfig"])]


@hookimpl
def rlkit_register_rewards():
    return [RewardSpec("shouting", "thirdparty_rewards:shouting")]
"""

REWARDS = """
def shouting(**kwargs):
    return lambda samples, **kw: [float(s.isupper()) for s in samples]
"""

BROKEN = """
import a_module_that_is_not_installed
"""


@pytest.fixture
def third_party(fake_distribution):
    fake_distribution(
        "rlkit-thirdparty",
        {"thirdparty": "thirdparty_plugin"},
        {"thirdparty_plugin": THIRD_PARTY, "thirdparty_rewards": REWARDS},
        version="2.1.0",
    )


@pytest.fixture
def broken(fake_distribution):
    fake_distribution("rlkit-broken", {"broken": "broken_plugin"}, {"broken_plugin": BROKEN}, version="0.3")


def test_entry_point_plugin_adds_a_method_and_a_reward(third_party, rlkit_host):
    status = rlkit_host.statuses["thirdparty"]
    assert (status.distribution, status.version, status.status) == ("rlkit-thirdparty", "2.1.0", "loaded")
    registry = rlkit_host.registry
    assert registry.get("method", "KTOConfig").name == "kto"
    assert status.provides == {"method": ["kto"], "reward": ["shouting"]}
    config = TRLConfig.from_dict(config_dict(method="ktoconfig"))
    assert type(config.method).__name__ == "KTOConfig" and config.method.num_pairs == 4


def test_rlkit_plugins_lists_the_entry_point_plugin(third_party, rlkit_host, capsys):
    assert main(["plugins", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)["plugins"]}
    assert rows["thirdparty"]["distribution"] == "rlkit-thirdparty"
    assert rows["thirdparty"]["provides"] == {"method": ["kto"], "reward": ["shouting"]}
    # our own distributions plug in the same way
    assert {"rlkit_methods", "rlkit_accelerate", "rlkit_nemo"} <= set(rows)


def test_a_config_selects_the_third_party_reward(third_party, rlkit_host):
    from rlkit_core.run import resolve_component

    config = TRLConfig.from_dict(config_dict(method="kto", reward="shouting"))
    fn = resolve_component(config.reward, "reward", rlkit_host.registry, "reward")
    assert fn(samples=["HEY", "hey"]) == [1.0, 0.0]


def test_a_broken_plugin_is_reported_and_the_others_keep_working(third_party, broken, rlkit_host, capsys):
    status = rlkit_host.statuses["broken"]
    assert status.status == "failed"
    assert "ModuleNotFoundError" in status.error and "a_module_that_is_not_installed" in status.error
    assert rlkit_host.registry.get("reward", "shouting")
    assert main(["plugins", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)["plugins"]}
    assert rows["broken"]["status"] == "failed" and rows["thirdparty"]["status"] == "loaded"


def test_a_run_naming_the_broken_plugins_component_names_the_plugin(broken, rlkit_host, tmp_path, capsys):
    path = tmp_path / "config.yml"
    import yaml

    path.write_text(yaml.safe_dump(config_dict(method="brokenmethod")))
    assert main(["config", "validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "unknown method 'brokenmethod'" in err
    assert "plugin 'broken' failed to load" in err and "a_module_that_is_not_installed" in err


def test_disabled_plugins_are_blocked(third_party, monkeypatch):
    monkeypatch.setenv("RLKIT_DISABLE_PLUGINS", "thirdparty, rlkit-nemo")
    host = PluginHost()
    assert host.statuses["thirdparty"].status == "blocked"
    assert host.statuses["rlkit_nemo"].status == "blocked"
    assert host.registry.find("method", "kto") is None
    with pytest.raises(RegistryError, match="installed"):
        host.registry.get("method", "kto")


def test_one_off_plugin_file_registers_its_hooks(tmp_path, rlkit_bare_host):
    path = tmp_path / "my_plugin.py"
    path.write_text(
        "from rlkit_core.testing.fakes import FakePlugin\n"
        "_fakes = FakePlugin()\n"
        "rlkit_register_methods = _fakes.rlkit_register_methods\n"
    )
    rlkit_bare_host.load_file(path)
    assert rlkit_bare_host.statuses["my_plugin"].source == "file"
    assert rlkit_bare_host.registry.get("method", "fake")


def test_one_off_plugin_file_errors_are_fatal_and_named(tmp_path, rlkit_bare_host):
    with pytest.raises(PluginError, match="not found"):
        rlkit_bare_host.load_file(tmp_path / "missing.py")
    bad = tmp_path / "bad.py"
    bad.write_text("raise RuntimeError('cannot start')\n")
    with pytest.raises(PluginError, match="bad.py.*RuntimeError: cannot start"):
        rlkit_bare_host.load_file(bad)


def test_trlx_decorators_register_through_the_same_registry(rlkit_bare_host):
    saved = (list(IN_PROCESS.methods), list(IN_PROCESS.trainers), list(IN_PROCESS.pipelines))
    try:

        @register_method
        class MyMethodConfig(FakeMethodConfig):
            pass

        @register_trainer
        class MyTrainer:
            pass

        @register_datapipeline("MyPipeline")
        class SomePipeline:
            pass

        registry = rlkit_bare_host.registry
        assert registry.get("method", "mymethodconfig").config_class is MyMethodConfig
        assert registry.get("trainer", "MyTrainer").target is MyTrainer
        assert registry.get("pipeline", "MyPipeline").target is SomePipeline
        assert rlkit_bare_host.statuses["in-process"].provides["trainer"] == ["MyTrainer"]
    finally:
        IN_PROCESS.methods[:], IN_PROCESS.trainers[:], IN_PROCESS.pipelines[:] = saved
        rlkit_bare_host.invalidate()


def test_set_host_restores_the_previous_host():
    mine = PluginHost(load_entry_points=False)
    previous = set_host(mine)
    assert set_host(previous) is mine
