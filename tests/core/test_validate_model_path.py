"""`config validate` warns about a model_path folder that is not there, and the examples that
start from another run's model say which command makes it."""

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


@pytest.mark.parametrize("model_path, warned", [
    ("ckpts/sft/checkpoint_500/hf_model", True),
    ("./my-model", True),
    ("gpt2", False),  # a hub id or a model source name
    ("org/name", False),
])
def test_a_missing_model_folder_is_a_warning_not_an_error(fake_host, capsys, tmp_path, monkeypatch, model_path, warned):
    monkeypatch.chdir(tmp_path)
    data = config_dict()
    data["model"]["model_path"] = model_path
    (tmp_path / "c.yml").write_text(yaml.safe_dump(data))
    code, err = validate(capsys, tmp_path / "c.yml")
    assert code == 0 and "ok:" in err
    assert (f"warning: model.model_path {model_path!r}: no such folder" in err) == warned, err
    if warned:  # once it exists, nothing to say
        Path(model_path).mkdir(parents=True)
        code, err = validate(capsys, tmp_path / "c.yml")
        assert code == 0 and "warning" not in err


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
    # the named config writes the folder this one reads: its last checkpoint's HF export
    train = yaml.safe_load((ROOT / made_by.group(1)).read_text())["train"]
    assert train["total_steps"] % train["checkpoint_interval"] == 0, made_by.group(1)
    written = f"{train['checkpoint_dir']}/checkpoint_{train['total_steps']}/hf_model"
    assert yaml.safe_load(text)["model"]["model_path"] == written
    # a fresh clone: the examples (configs name files under examples/ from the root) and no ckpts/ yet
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    code, err = validate(capsys, example)
    assert code == 0 and "warning: model.model_path 'ckpts/" in err, err
