"""Plugins cannot fake success or take the CLI down: exits, interrupts and hangs at import are
plugin failures; a broken command hook leaves the other commands; hooks that misbehave are named;
Ctrl-C and SIGTERM end a run with 130/143 and one line, never 0 (issue 16, item 1/3)."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from rlkit_core import PluginError, hookimpl
from rlkit_core.cli import main
from rlkit_core.deadline import ImportTimedOut, call_with_deadline
from rlkit_core.plugins import PluginHost, set_host
from rlkit_core.testing import config_dict


def host_with(fake_distribution, monkeypatch, timeout="1", **plugins):
    """A fresh host loading only the given plugin modules (name -> source) as entry points."""
    monkeypatch.setenv("RLKIT_PLUGIN_IMPORT_TIMEOUT", timeout)
    eps = []
    for name, source in plugins.items():
        fake_distribution(f"rlkit-{name}", {name: f"{name}_mod"}, {f"{name}_mod": textwrap.dedent(source)})
        eps.append(name)
    import importlib.metadata

    selected = [ep for ep in importlib.metadata.entry_points(group="rlkit") if ep.name in eps]
    host = PluginHost(load_entry_points=False)
    host.load_entry_points(selected)
    return host


@pytest.mark.parametrize(
    "source, expected",
    [
        ("import sys\nsys.exit(0)\n", "called sys.exit(0) at import"),
        ("raise SystemExit\n", "called sys.exit(None) at import"),
        ("raise KeyboardInterrupt\n", "raised KeyboardInterrupt at import"),
        ("import time\ntime.sleep(30)\n", "import did not finish within 1s"),
        ("while True:\n    pass\n", "import did not finish within 1s"),
    ],
    ids=["sys.exit(0)", "SystemExit", "KeyboardInterrupt", "sleeps", "spins"],
)
def test_exits_interrupts_and_hangs_at_import_are_plugin_failures(fake_distribution, monkeypatch, source, expected):
    host = host_with(fake_distribution, monkeypatch, bad=source)
    status = host.statuses["bad"]
    assert status.status == "failed" and expected in status.error, status.error


def test_rlkit_plugins_shows_a_plugin_that_exits_and_the_others_still_work(fake_distribution, monkeypatch, capsys):
    host = host_with(fake_distribution, monkeypatch, quitter="import sys\nsys.exit(0)\n")
    host.load_entry_points()  # ours too
    previous = set_host(host)
    try:
        assert main(["plugins", "--json"]) == 0
        rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["plugins"]}
        assert rows["quitter"]["status"] == "failed" and "sys.exit(0)" in rows["quitter"]["error"]
        assert rows["rlkit_methods"]["status"] == "loaded"
    finally:
        set_host(previous)


def test_a_deadline_from_another_thread_abandons_the_import():
    seen = {}

    def worker():
        try:
            call_with_deadline(lambda: time.sleep(5), 0.2)
        except ImportTimedOut as exc:
            seen["error"] = str(exc)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(3)
    assert "abandoned" in seen["error"]


def test_a_bad_timeout_setting_is_one_line(fake_distribution, monkeypatch):
    with pytest.raises(PluginError, match="RLKIT_PLUGIN_IMPORT_TIMEOUT='soon': expected seconds"):
        host_with(fake_distribution, monkeypatch, timeout="soon", fine="x = 1\n")


BROKEN_COMMANDS = """
from rlkit_core import hookimpl

@hookimpl
def rlkit_register_commands(app):
    @app.command("half")
    def half():
        pass
    raise RuntimeError("no commands today")
"""


def test_a_raising_command_hook_leaves_help_and_the_other_commands(fake_distribution, monkeypatch, capsys):
    host = host_with(fake_distribution, monkeypatch, brokencmd=BROKEN_COMMANDS)
    host.load_entry_points()
    previous = set_host(host)
    try:
        assert main(["--help"]) == 0
        out, err = capsys.readouterr()
        assert "report" in out and "half" not in out  # rlkit_methods' command stays, the half-added one goes
        assert "plugin 'brokencmd'" in err and "RuntimeError: no commands today" in err
        assert main(["plugins", "--json"]) == 0
        rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["plugins"]}
        assert "rlkit_register_commands raised RuntimeError" in rows["brokencmd"]["error"]
    finally:
        set_host(previous)


@pytest.mark.parametrize("garbage, shown", [("3", "got int 3"), ("[1]", "got an item int 1"), ("['ppo']", "got an item str 'ppo'")])
def test_a_registration_hook_returning_garbage_names_the_plugin(fake_distribution, monkeypatch, garbage, shown):
    source = f"from rlkit_core import hookimpl\n\n@hookimpl\ndef rlkit_register_methods():\n    return {garbage}\n"
    host = host_with(fake_distribution, monkeypatch, garbage=source)
    host.load_entry_points()
    registry = host.registry  # builds without raising
    assert registry.find("method", "ppo") is not None
    status = host.statuses["garbage"]
    assert status.status == "failed" and "rlkit_register_methods must return a list of MethodSpec records" in status.error
    assert shown in status.error


def test_a_raising_lifecycle_hook_names_the_plugin(rlkit_bare_host):
    class Observer:
        @hookimpl
        def rlkit_step_end(self, step):
            raise ValueError(f"cannot log step {step}")

    class Quitter:
        @hookimpl
        def rlkit_checkpoint_saved(self):
            sys.exit(0)

    rlkit_bare_host.register(Observer(), "my_observer")
    rlkit_bare_host.register(Quitter(), "quitter")
    with pytest.raises(PluginError, match="plugin 'my_observer': rlkit_step_end raised ValueError: cannot log step 3"):
        rlkit_bare_host.hook.rlkit_step_end(trainer=None, step=3, metrics={}, is_main_process=True)
    with pytest.raises(PluginError, match=r"plugin 'quitter': rlkit_checkpoint_saved called sys.exit\(0\)"):
        rlkit_bare_host.hook.rlkit_checkpoint_saved(trainer=None, step=3, path=None, is_main_process=True)


def test_ctrl_c_during_run_exits_130_with_one_line(fake_host, capsys, tmp_path, monkeypatch):
    from rlkit_core.testing import FakeTrainer

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(FakeTrainer, "learn", interrupted)
    path = tmp_path / "config.yml"
    import yaml

    path.write_text(yaml.safe_dump(config_dict(reward="constant")))
    assert main(["run", str(path)]) == 130
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines == ["error: interrupted by SIGINT (Ctrl-C); stopped"]


SLOW_PLUGIN = """
import time
from rlkit_core.testing.fakes import FakePlugin, FakeTrainer

_fakes = FakePlugin()
rlkit_register_methods = _fakes.rlkit_register_methods
rlkit_register_backends = _fakes.rlkit_register_backends
rlkit_register_pipelines = _fakes.rlkit_register_pipelines
rlkit_register_rewards = _fakes.rlkit_register_rewards

def slow_learn(self):
    print("learning", flush=True)
    time.sleep(60)

FakeTrainer.learn = slow_learn
"""


@pytest.mark.parametrize("signum, code, line", [(signal.SIGINT, 130, "SIGINT (Ctrl-C)"), (signal.SIGTERM, 143, "SIGTERM")])
def test_a_signal_during_rlkit_run_exits_with_its_code_and_one_line(tmp_path, signum, code, line):
    import yaml

    (tmp_path / "slow_plugin.py").write_text(SLOW_PLUGIN)
    config = tmp_path / "config.yml"
    config.write_text(yaml.safe_dump(config_dict(reward="constant")))
    script = "import sys; from rlkit_core.cli import main; sys.argv[0] = 'rlkit'; main(sys.argv[1:])"
    env = dict(os.environ, RLKIT_DISABLE_PLUGINS="rlkit_accelerate,rlkit_nemo,rlkit_methods")
    proc = subprocess.Popen([sys.executable, "-c", script, "run", str(config), "--plugin", str(tmp_path / "slow_plugin.py")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "learning"
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code, err
    lines = [text for text in err.splitlines() if text.strip()]
    assert lines == [f"error: interrupted by {line}; stopped"], err


def test_a_plugin_file_whose_registration_hook_returns_garbage_is_refused(fake_host, tmp_path, capsys):
    """--plugin names a file the user asked for: garbage from its hooks is as fatal as an import error
    (it was recorded as a failed plugin and the command went on: `config validate` said ok)."""
    import yaml

    plugin = tmp_path / "garbage.py"
    plugin.write_text("from rlkit_core import hookimpl\n\n@hookimpl\ndef rlkit_register_methods():\n    return 3\n")
    config = tmp_path / "config.yml"
    config.write_text(yaml.safe_dump(config_dict(reward="constant")))
    assert main(["config", "validate", str(config), "--plugin", str(plugin)]) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines == [f"error: plugin file '{plugin}': rlkit_register_methods must return a list of MethodSpec records, got int 3"]
