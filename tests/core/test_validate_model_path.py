"""`config validate` warns about a model_path folder that is not there, and the examples that
start from another run's model say which command makes it."""

from pathlib import Path

import pytest
import yaml

from rlkit_core.cli import main
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


@pytest.mark.parametrize("example, sft", [
    ("ppo_randomwalks.yml", "sft_randomwalks.yml"),
    ("ppo_lora_randomwalks.yml", "sft_randomwalks.yml"),
    ("ppo_t5_randomwalks.yml", "sft_t5_randomwalks.yml"),
])
def test_examples_that_need_the_sft_model_say_how_to_make_it(example, sft, rlkit_host, capsys, tmp_path, monkeypatch):
    text = (ROOT / "examples" / "randomwalks" / example).read_text()
    model_line = next(line for line in text.splitlines() if line.strip().startswith("model_path:"))
    assert f"# made by: rlkit run examples/randomwalks/{sft}" in model_line
    # the SFT config writes the folder the PPO config reads
    sft_dir = yaml.safe_load((ROOT / "examples" / "randomwalks" / sft).read_text())["train"]["checkpoint_dir"]
    assert yaml.safe_load(text)["model"]["model_path"].startswith(sft_dir + "/")
    monkeypatch.chdir(tmp_path)  # a fresh clone: no ckpts/ yet
    code, err = validate(capsys, ROOT / "examples" / "randomwalks" / example)
    assert code == 0 and "warning: model.model_path 'ckpts/" in err, err
