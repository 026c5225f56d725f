"""The rlkit command line: thin commands, one-line errors, exit codes, no torch for --help."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import yaml

from rlkit_core.cli import main
from rlkit_core.errors import ConfigError
from rlkit_core.testing import config_dict


def write(tmp_path, data, name="config.yml"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return str(path)


def run_cli(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def one_error_line(err):
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    return lines[0]


@pytest.mark.parametrize(
    "args, expected",
    [
        (["config", "validate", "missing.yml"], "missing.yml: config file not found"),
        (["run", "missing.yml"], "missing.yml: config file not found"),
    ],
)
def test_missing_config_file(fake_host, capsys, tmp_path, monkeypatch, args, expected):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, *args)
    assert code == 2 and expected in one_error_line(err)


def test_invalid_yaml(fake_host, capsys, tmp_path):
    code, _, err = run_cli(capsys, "config", "validate", write(tmp_path, "train: [1, 2\n"))
    assert code == 2 and "invalid YAML: line" in one_error_line(err)


def test_unknown_method_name(fake_host, capsys, tmp_path):
    code, _, err = run_cli(capsys, "config", "validate", write(tmp_path, config_dict(method="ppoo")))
    assert code == 2
    assert "method.name: unknown method 'ppoo'; installed: fake" in one_error_line(err)


def test_unknown_reward(fake_host, capsys, tmp_path):
    path = write(tmp_path, config_dict(reward="vaderr"))
    code, _, err = run_cli(capsys, "run", path)
    assert code == 2
    assert "reward.name: unknown reward 'vaderr'; installed: constant" in one_error_line(err)


def test_set_without_equals(fake_host, capsys, tmp_path):
    code, _, err = run_cli(capsys, "config", "validate", write(tmp_path, config_dict()), "--set", "train.batch_size")
    assert code == 2 and "--set 'train.batch_size': expected KEY=VALUE" in one_error_line(err)


def test_wrong_type_from_set(fake_host, capsys, tmp_path):
    code, _, err = run_cli(capsys, "config", "validate", write(tmp_path, config_dict()), "--set", "train.batch_size=abc")
    assert code == 2
    assert "train.batch_size: expected an integer, got 'abc'" in one_error_line(err)


def test_several_errors_print_one_line_each(fake_host, capsys, tmp_path):
    data = config_dict()
    data["train"]["total_step"] = data["train"].pop("total_steps")
    data["train"]["batch_size"] = -1
    code, _, err = run_cli(capsys, "config", "validate", write(tmp_path, data))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 3 and all(line.startswith("error: train.") for line in lines)


def test_validate_and_show_a_good_config(fake_host, capsys, tmp_path):
    path = write(tmp_path, config_dict())
    code, _, err = run_cli(capsys, "config", "validate", path, "--set", "train.batch_size=8")
    assert code == 0 and "ok" in err
    code, out, _ = run_cli(capsys, "config", "show", path, "--set", "train.batch_size=8")
    shown = yaml.safe_load(out)
    assert code == 0 and shown["train"]["batch_size"] == 8 and shown["train"]["checkpoint_dir"] == "ckpts"


def test_run_trains_with_the_configured_reward_and_prompts(fake_host, capsys, tmp_path):
    from rlkit_core.testing import RecordingObserver

    observer = RecordingObserver()
    fake_host.register(observer, "observer", source="test")
    data = config_dict(reward="constant", data={"prompts": {"pipeline": "in_memory", "kwargs": {"items": ["p1", "p2", "p3"]}}})
    data["reward"] = {"name": "constant", "kwargs": {"value": 3.0}}
    code, _, err = run_cli(capsys, "run", write(tmp_path, data))
    assert code == 0, err
    steps = [kw for name, kw in observer.calls if name == "rlkit_step_end"]
    assert len(steps) == 4 and steps[-1]["metrics"]["reward/mean"] == 3.0


def test_run_loads_a_one_off_plugin_file(rlkit_bare_host, capsys, tmp_path):
    plugin = tmp_path / "fakes_plugin.py"
    plugin.write_text(
        textwrap.dedent(
            """
            from rlkit_core.testing.fakes import FakePlugin
            _fakes = FakePlugin()
            rlkit_register_methods = _fakes.rlkit_register_methods
            rlkit_register_backends = _fakes.rlkit_register_backends
            rlkit_register_pipelines = _fakes.rlkit_register_pipelines
            rlkit_register_rewards = _fakes.rlkit_register_rewards
            """
        )
    )
    path = write(tmp_path, config_dict(reward="constant"))
    code, _, err = run_cli(capsys, "run", path)
    assert code == 2 and "unknown method 'fake'" in err
    code, _, err = run_cli(capsys, "run", path, "--plugin", str(plugin))
    assert code == 0, err


def test_runtime_errors_exit_1_and_debug_shows_the_traceback(fake_host, capsys, tmp_path, monkeypatch):
    from rlkit_core.testing import FakeTrainer

    def explode(self):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(FakeTrainer, "learn", explode)
    path = write(tmp_path, config_dict(reward="constant"))
    code, _, err = run_cli(capsys, "run", path)
    assert code == 1 and "RuntimeError: out of memory" in one_error_line(err)
    monkeypatch.setenv("RLKIT_DEBUG", "1")
    with pytest.raises(RuntimeError, match="out of memory"):
        main(["run", path])


@pytest.mark.parametrize("exc, shown", [
    (ConfigError("train.trainer: install rlkit-nemo[nemo] ([bold] is text)"), "error: train.trainer: install rlkit-nemo[nemo] ([bold] is text)"),
    (RuntimeError("index [0] of [red]x[/]"), "error: RuntimeError: index [0] of [red]x[/] (set RLKIT_DEBUG=1"),
])
def test_error_text_in_square_brackets_is_printed_as_written(exc, shown, fake_host, capsys, tmp_path, monkeypatch):
    """The console's markup is rlkit's own; a message's brackets (an install extra) are text."""
    from rlkit_core.testing import FakeTrainer

    def explode(self):
        raise exc

    monkeypatch.setattr(FakeTrainer, "learn", explode)
    code, _, err = run_cli(capsys, "run", write(tmp_path, config_dict(reward="constant")))
    assert code in (1, 2) and " ".join(one_error_line(err).split()).startswith(shown), err


def test_usage_errors_exit_2(capsys):
    code, _, err = run_cli(capsys, "config", "show")
    assert code == 2 and "Missing argument" in err


def test_run_without_config_uses_the_main_job(fake_host, capsys, monkeypatch):
    import importlib

    cli = importlib.import_module("rlkit_core.cli.app")
    assert cli.DEFAULT_CONFIG.is_file()
    seen = []

    def load(config, sets, plugins):
        seen.append(config)
        raise ConfigError("stop here")

    monkeypatch.setattr(cli, "_load", load)
    run_cli(capsys, "run")
    assert seen == [cli.DEFAULT_CONFIG]
    monkeypatch.undo()
    monkeypatch.setattr(cli, "DEFAULT_CONFIG", cli.DEFAULT_CONFIG.with_name("missing.yml"))
    code, _, err = run_cli(capsys, "run")
    assert code == 2 and "no CONFIG given" in err


@pytest.fixture
def torch_poisoned_env(tmp_path):
    """An environment in which `import torch` fails loudly."""
    poison = tmp_path / "poison" / "torch"
    poison.mkdir(parents=True)
    (poison / "__init__.py").write_text("raise ImportError('torch must not be imported here')\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(poison.parent), env.get("PYTHONPATH", "")])
    return env


def run_without_torch(env, *args):
    code = f"from rlkit_core.cli import main; raise SystemExit(main({list(args)!r}))"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


def test_help_runs_where_importing_torch_fails(torch_poisoned_env):
    result = run_without_torch(torch_poisoned_env, "--help")
    assert result.returncode == 0, result.stderr
    assert "run" in result.stdout and "plugins" in result.stdout


def test_plugins_lists_every_plugin_loaded_where_importing_torch_fails(torch_poisoned_env):
    result = run_without_torch(torch_poisoned_env, "plugins", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["plugins"]
    assert {r["name"] for r in rows} >= {"rlkit_methods", "rlkit_accelerate", "rlkit_nemo"}
    assert all(r["status"] == "loaded" for r in rows), rows


def test_validate_checks_the_names_a_config_uses(fake_host, capsys, tmp_path):
    data = config_dict(reward="nonexist", trainer="NoTrainer", data={"prompts": {"path": str(tmp_path / "none.txt")}})
    code, _, err = run_cli(capsys, "config", "validate", write(tmp_path, data))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 3, err
    assert "train.trainer: unknown trainer 'NoTrainer'" in lines[0]
    assert "data.prompts.path: file" in lines[1] and "reward.name: unknown reward 'nonexist'" in lines[2]


def test_plugin_commands_are_added_once_per_call(fake_host, capsys):
    from rlkit_core.cli import app

    for _ in range(3):
        run_cli(capsys, "--help")
    names = [c.name or c.callback.__name__ for c in app.registered_commands]
    assert len(names) == len(set(names))
