"""What users expect of a command line: --version, env, completion, readable help, python -m."""

import fnmatch
import json
import os
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from rlkit_core.cli import main

ROOT = Path(__file__).resolve().parents[2]


def run_cli(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_version_prints_the_installed_distribution_version(capsys):
    code, out, _ = run_cli(capsys, "--version")
    assert code == 0 and out.strip() == f"rlkit {metadata.version('rlkit-core')}"


def test_python_dash_m_runs_the_cli():
    result = subprocess.run([sys.executable, "-m", "rlkit_core", "--version"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"rlkit {metadata.version('rlkit-core')}"
    result = subprocess.run([sys.executable, "-m", "rlkit_core", "config", "show"], capture_output=True, text=True)
    assert result.returncode == 2 and "Missing argument" in result.stderr


def test_help_shows_readable_metavars_and_completion(capsys):
    code, out, _ = run_cli(capsys, "run", "--help")
    assert code == 0
    assert "-s, --set KEY=VALUE" in out and "-p, --plugin FILE.py" in out
    assert "list[" not in out
    code, out, _ = run_cli(capsys, "--help")
    assert "--install-completion" in out and "--version" in out and "env" in out


def test_shell_completion_completes_command_names():
    env = dict(os.environ, _RLKIT_COMPLETE="complete_bash", COMP_WORDS="rlkit con", COMP_CWORD="1")
    code = "import sys; sys.argv[0] = 'rlkit'; from rlkit_core.cli import main; main()"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["config"]


def test_env_names_core_plugins_libraries_and_cuda(capsys):
    code, out, _ = run_cli(capsys, "env", "--json")
    info = json.loads(out)
    assert code == 0
    assert info["rlkit-core"] == metadata.version("rlkit-core")
    plugins = {p["distribution"]: p for p in info["plugins"]}
    assert {"rlkit-methods", "rlkit-accelerate", "rlkit-nemo"} <= set(plugins)
    assert plugins["rlkit-methods"]["version"] == metadata.version("rlkit-methods")
    assert info["libraries"]["torch"] == metadata.version("torch")
    assert info["libraries"]["transformers"] == metadata.version("transformers")
    assert info["libraries"]["accelerate"] == metadata.version("accelerate")
    import torch

    assert info["cuda"]["available"] == torch.cuda.is_available()
    code, out, _ = run_cli(capsys, "env")
    lines = out.splitlines()
    assert lines[0] == f"rlkit-core: {metadata.version('rlkit-core')}"
    assert f"torch: {metadata.version('torch')}" in lines and lines[-1].startswith("cuda: ")


def test_env_imports_torch_only_for_the_cuda_line():
    code = (
        "import sys; import rlkit_core.cli.env as e, rlkit_core.cli;"
        "assert 'torch' not in sys.modules;"
        "e.cuda_info(); assert 'torch' in sys.modules"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_env_reports_a_broken_torch_instead_of_failing(tmp_path):
    poison = tmp_path / "poison" / "torch"
    poison.mkdir(parents=True)
    (poison / "__init__.py").write_text("raise ImportError('broken torch')\n")
    env = dict(os.environ, PYTHONPATH=str(poison.parent))
    code = "from rlkit_core.cli import main; raise SystemExit(main(['env']))"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "cuda: unknown (ImportError: broken torch)" in result.stdout


def test_the_main_job_config_is_package_data():
    """`rlkit run` with no argument reads a file that the rlkit-core wheel ships."""
    import rlkit_core
    from rlkit_core.cli.app import DEFAULT_CONFIG

    package = Path(rlkit_core.__file__).parent
    relative = DEFAULT_CONFIG.relative_to(package).as_posix()
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["rlkit_core"]
    assert DEFAULT_CONFIG.is_file() and any(fnmatch.fnmatch(relative, g) for g in globs), (relative, globs)
    # the example users are pointed at is that same file
    assert (ROOT / "examples" / "sentiments" / "ppo_smollm2.yml").resolve() == DEFAULT_CONFIG.resolve()


@pytest.mark.parametrize("command", [["--help"], ["env", "--help"], ["--version"]])
def test_no_torch_for_help_and_version(command, tmp_path):
    poison = tmp_path / "poison" / "torch"
    poison.mkdir(parents=True)
    (poison / "__init__.py").write_text("raise ImportError('torch must not be imported here')\n")
    env = dict(os.environ, PYTHONPATH=str(poison.parent))
    code = f"from rlkit_core.cli import main; raise SystemExit(main({command!r}))"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_run_shows_rlkit_log_records_on_stderr(fake_host, capsys, tmp_path, monkeypatch):
    """A first run converts a model for a minute: its one info line reaches the user."""
    import logging

    import yaml

    from rlkit_core.testing import config_dict
    from rlkit_core.testing.fakes import FakeTrainer

    def learn(self):
        logging.getLogger("rlkit_methods.some_module").info("converting the model once")
        logging.getLogger("rlkit_methods.some_module").debug("not shown")
        logging.getLogger("thirdparty").info("not ours, not shown")

    monkeypatch.setattr(FakeTrainer, "learn", learn)
    for name in ("rlkit_core", "rlkit_methods", "rlkit_accelerate", "rlkit_nemo"):
        logger = logging.getLogger(name)
        monkeypatch.setattr(logger, "handlers", [])
        monkeypatch.setattr(logger, "level", logging.NOTSET)
        monkeypatch.setattr(logger, "propagate", True)
    path = tmp_path / "c.yml"
    path.write_text(yaml.safe_dump(config_dict(reward="constant")))
    code, _, err = run_cli(capsys, "run", str(path))
    assert code == 0, err
    assert "converting the model once" in err.splitlines()
    assert "not shown" not in err and "not ours" not in err
