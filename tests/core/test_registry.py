import pytest

from rlkit_core import MethodSpec, PluginError, RegistryError, RewardSpec, hookimpl
from rlkit_core.plugins import PluginHost
from rlkit_core.registry import Registry, load_target
from rlkit_core.testing import FakeMethodConfig


def test_names_are_case_insensitive_and_aliases_select_the_method():
    registry = Registry()
    spec = MethodSpec("ppo", FakeMethodConfig, mode="online", aliases=["PPOConfig"])
    registry.add("method", spec, "a (dist-a 1.0)")
    assert registry.get("method", "PPO") is spec
    assert registry.get("method", "ppoconfig") is spec
    assert registry.names("method") == ["ppo"]


def test_unknown_name_lists_what_is_installed_and_failed_plugins():
    registry = Registry()
    registry.add("reward", RewardSpec("vader", "x:y"), "p (d 1)")
    registry.failed["broken"] = "ImportError: no module named nothing"
    with pytest.raises(RegistryError) as info:
        registry.get("reward", "sentiment")
    message = str(info.value)
    assert "unknown reward 'sentiment'" in message
    assert "installed: vader" in message
    assert "plugin 'broken' failed to load (ImportError: no module named nothing)" in message


class _RewardPlugin:
    def __init__(self, target):
        self.target = target

    @hookimpl
    def rlkit_register_rewards(self):
        return [RewardSpec("score", self.target)]


def test_two_plugins_providing_one_name_is_an_error_naming_both():
    host = PluginHost(load_entry_points=False)
    host.register(_RewardPlugin("a:f"), "first")
    host.register(_RewardPlugin("b:f"), "second")
    with pytest.raises(RegistryError) as info:
        host.registry.get("reward", "score")
    assert "first" in str(info.value) and "second" in str(info.value)
    assert "provided by both" in str(info.value)


def test_selection_never_depends_on_registration_order():
    for order in (("first", "second"), ("second", "first")):
        host = PluginHost(load_entry_points=False)
        for name in order:
            host.register(_RewardPlugin(f"{name}:f"), name)
        with pytest.raises(RegistryError):
            host.registry.find("reward", "score")


def test_a_plugin_whose_registration_raises_is_marked_failed_and_others_work():
    class Raising:
        @hookimpl
        def rlkit_register_rewards(self):
            raise RuntimeError("boom")

    host = PluginHost(load_entry_points=False)
    host.register(Raising(), "raising")
    host.register(_RewardPlugin("ok:f"), "fine")
    assert host.registry.get("reward", "score").target == "ok:f"
    assert host.statuses["raising"].status == "failed"
    assert "boom" in host.statuses["raising"].error


def test_registration_returning_a_non_list_is_reported():
    class Wrong:
        @hookimpl
        def rlkit_register_rewards(self):
            return RewardSpec("x", "a:b")

    host = PluginHost(load_entry_points=False)
    host.register(Wrong(), "wrong")
    host.registry
    assert "must return a list" in host.statuses["wrong"].error


def test_load_target_imports_strings_and_passes_objects_through():
    assert load_target("os.path:join") is __import__("os").path.join
    assert load_target(len) is len
    with pytest.raises(RegistryError, match="cannot import"):
        load_target("no_such_module_xyz:thing")
    with pytest.raises(RegistryError, match="has no attribute"):
        load_target("os:no_such_attribute")
    with pytest.raises(RegistryError, match="expected 'module:attribute'"):
        load_target("os.path.join")


def test_a_misspelled_hook_name_fails_the_plugin_instead_of_never_running():
    class Typo:
        @hookimpl
        def rlkit_stepend(self, step):
            pass

    host = PluginHost(load_entry_points=False)
    host.register(_RewardPlugin("ok:f"), "fine")
    with pytest.raises(PluginError, match="rlkit_stepend"):
        host.register(Typo(), "typo")
    assert host.statuses["typo"].status == "failed" and host.pm.get_plugin("typo") is None
    assert host.registry.get("reward", "score")
