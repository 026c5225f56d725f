"""plugins/rlkit_nemo/scripts/randomwalks.py reads OUT [methods] [--pp N]: --help prints the
usage and runs nothing, and a misspelt method or flag is one line, not an output folder."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "plugins" / "rlkit_nemo" / "scripts" / "randomwalks.py"


def load():
    spec = importlib.util.spec_from_file_location("nemo_randomwalks_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_arguments_parse_and_mistakes_are_one_line(capsys, tmp_path):
    script = load()
    assert script.parse_args([str(tmp_path), "sft", "grpo", "--pp", "2"]) == (tmp_path, ["sft", "grpo"], 2)
    with pytest.raises(SystemExit) as stop:
        script.parse_args(["--help"])
    assert stop.value.code == 0 and "OUT [ilql]" in capsys.readouterr().out
    for argv, message in ((["out", "bogus"], "unknown argument 'bogus'"), (["-x"], "unknown argument '-x'"),
                          (["out", "ppo", "--pp"], "--pp needs a number")):
        with pytest.raises(SystemExit, match=message):
            script.parse_args(argv)
    assert not Path("--help").exists()
