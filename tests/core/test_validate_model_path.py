"""A model_path folder that is not there is an error before anything loads, and the examples
that start from another run's model name the command that makes it, which the error quotes."""

import re
from pathlib import Path

import pytest
import yaml

from rlkit_core.cli import main
from rlkit_core.preflight import looks_like_a_folder
from rlkit_core.testing import config_dict

ROOT = Path(__file__).resolve().parents[2]


def validate(capsys, path):
    code = main(["config", "validate", str(path)])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("model_path, refused", [
    ("ckpts/sft/checkpoint_500/hf_model", True),
    ("./my-model", True),
    ("gpt2", False),  # a hub id or a model source name
    ("org/name", False),
])
def test_a_missing_model_folder_is_an_error(fake_host, capsys, tmp_path, monkeypatch, model_path, refused):
    monkeypatch.chdir(tmp_path)
    data = config_dict()
    data["model"]["model_path"] = model_path
    (tmp_path / "c.yml").write_text(yaml.safe_dump(data))
    code, err = validate(capsys, tmp_path / "c.yml")
    assert code == (2 if refused else 0), err
    if refused:
        assert f"model.model_path {model_path!r}: no such folder; make it first" in err, err
        Path(model_path).mkdir(parents=True)  # once it exists, nothing to say
        code, err = validate(capsys, tmp_path / "c.yml")
        assert code == 0 and "model_path" not in err


def test_the_error_quotes_the_command_the_config_names(fake_host, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = yaml.safe_dump(config_dict()).replace(
        "model_path: ", "model_path: runs/sft/hf_model   # made by: rlkit run sft.yml\n  old_path: ", 1)
    (tmp_path / "c.yml").write_text("\n".join(line for line in text.splitlines() if "old_path" not in line))
    code, err = validate(capsys, tmp_path / "c.yml")
    assert code == 2 and "model.model_path 'runs/sft/hf_model': no such folder; make it first: rlkit run sft.yml" in err
    # a --set that names another folder is not what the comment is about
    code = main(["config", "validate", str(tmp_path / "c.yml"), "--set", "model.model_path=runs/other/hf_model"])
    err = capsys.readouterr().err
    assert code == 2 and "no such folder; make it first (the run that writes it)" in err, err


def examples_from_another_run() -> list[Path]:
    """Every shipped example whose model_path is a folder another run writes."""
    found = []
    for path in sorted((ROOT / "examples").rglob("*.yml")):
        if "plugin_template" in path.parts:
            continue
        model_path = (yaml.safe_load(path.read_text()).get("model") or {}).get("model_path")
        if isinstance(model_path, str) and looks_like_a_folder(model_path):
            found.append(path)
    return found


def test_the_examples_from_another_run_are_found():
    names = {p.name for p in examples_from_another_run()}
    assert {"ppo_randomwalks.yml", "ppo_lora_randomwalks.yml", "ppo_t5_randomwalks.yml", "rft_randomwalks.yml",
            "grpo_randomwalks.yml", "rloo_randomwalks.yml"} <= names


@pytest.mark.parametrize("example", examples_from_another_run(), ids=lambda p: str(p.relative_to(ROOT)))
def test_examples_that_need_another_runs_model_say_how_to_make_it(example, rlkit_host, capsys, tmp_path, monkeypatch):
    text = example.read_text()
    model_line = next(line for line in text.splitlines() if line.strip().startswith("model_path:"))
    made_by = re.search(r"# made by: rlkit run (\S+\.yml)\s*$", model_line)
    assert made_by, f"{example.name}: the model_path line names no command: {model_line!r}"
    # the named config writes the folder this one reads: its final export, whatever total_steps
    train = yaml.safe_load((ROOT / made_by.group(1)).read_text())["train"]
    assert yaml.safe_load(text)["model"]["model_path"] == f"{train['checkpoint_dir']}/hf_model"
    # a fresh clone: the examples (configs name files under examples/ from the root) and no ckpts/ yet
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    code, err = validate(capsys, example)
    assert code == 2 and f"no such folder; make it first: rlkit run {made_by.group(1)}" in err, err
