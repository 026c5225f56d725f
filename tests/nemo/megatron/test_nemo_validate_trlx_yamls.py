"""trlX's NeMo Megatron YAMLs (tests/nemo/fixtures/trlx_nemo_configs, copied unchanged) validate
with ``rlkit config validate`` in the config trlX's scripts hand them to: its NeMo examples
set ``train.trainer`` to a NeMo trainer and ``train.trainer_kwargs.megatron_cfg`` to the YAML
(a path, a bare name, or the OmegaConf config ``default_nemo_*_config()`` loaded). Runs in the
NeMo venv (omegaconf resolves the YAMLs' ${multiply:...} interpolations)."""

from pathlib import Path

import pytest

from rlkit_core.cli import main
from rlkit_core.preflight import check_config
from rlkit_methods import default_ilql_config, default_ppo_config, default_sft_config

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "trlx_nemo_configs"
DEFAULTS = {"NeMoPPOTrainer": default_ppo_config, "NeMoILQLTrainer": default_ilql_config, "NeMoSFTTrainer": default_sft_config}
# (YAML, trainer) as trlX's scripts pair them: nemo_ppo_sentiments.py (1.3b, 2b, 20b),
# nemo_sft_sentiments.py (1.3b, 20b), nemo_ilql_sentiments.py / nemo_*_inference.py (20b),
# llama_nemo (the converted megatron_llama_cfg.yaml); megatron_65b.yaml and
# sft_megatron_20b.yaml are loaded by no trlX script and are checked with the trainer their
# exp_manager names (PPO, SFT)
PAIRS = [
    ("megatron_1.3b.yaml", "NeMoPPOTrainer"), ("megatron_2b.yaml", "NeMoPPOTrainer"), ("megatron_20b.yaml", "NeMoPPOTrainer"),
    ("megatron_1.3b.yaml", "NeMoSFTTrainer"), ("megatron_20b.yaml", "NeMoSFTTrainer"), ("megatron_20b.yaml", "NeMoILQLTrainer"),
    ("megatron_llama_cfg.yaml", "NeMoPPOTrainer"), ("megatron_65b.yaml", "NeMoPPOTrainer"), ("sft_megatron_20b.yaml", "NeMoSFTTrainer"),
]


def trlx_config(trainer, megatron_cfg):
    return DEFAULTS[trainer]().evolve(
        train=dict(trainer=trainer, trainer_kwargs=dict(pretrained_model=None, megatron_cfg=megatron_cfg)),
        model=dict(model_path="gpt2"), tokenizer=dict(tokenizer_path="gpt2"),
    )


@pytest.mark.parametrize("name, trainer", PAIRS, ids=lambda v: v)
def test_trlx_megatron_yaml_validates_with_the_cli(name, trainer, tmp_path, rlkit_host, capsys):
    path = tmp_path / "config.yml"
    trlx_config(trainer, str(FIXTURES / name)).save_yaml(path)
    code = main(["config", "validate", str(path)])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 0 and err.startswith(f"ok: {path} ") and f"trainer {trainer}" in err, err


def test_a_broken_trlx_yaml_is_one_line_from_validate(tmp_path, rlkit_host, capsys):
    text = (FIXTURES / "megatron_20b.yaml").read_text().replace("${multiply:4, ${.hidden_size}}", "${multiply:4, ${.hiden_size}}")
    assert "hiden_size" in text
    (tmp_path / "megatron.yaml").write_text(text)
    path = tmp_path / "config.yml"
    trlx_config("NeMoPPOTrainer", str(tmp_path / "megatron.yaml")).save_yaml(path)
    code = main(["config", "validate", str(path)])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and err.startswith("error: megatron_cfg") and "ffn_hidden_size: cannot resolve" in err, err
    assert err.count("error:") == 1


@pytest.mark.parametrize("name", ["megatron_1.3b.yaml", "megatron_2b.yaml", "megatron_20b.yaml"])
def test_the_omegaconf_config_trlx_scripts_pass_is_checked_too(name, rlkit_host):
    from omegaconf import OmegaConf

    loaded = OmegaConf.load(FIXTURES / name)  # what default_nemo_*_config() returned
    config = trlx_config("NeMoPPOTrainer", loaded)
    assert check_config(config, rlkit_host.registry, rlkit_host.hook) == []
    loaded.model.tensor_model_parallel_size, loaded.model.num_attention_heads = 2, 7  # edited after loading
    problems = check_config(trlx_config("NeMoPPOTrainer", loaded), rlkit_host.registry, rlkit_host.hook)
    assert problems == ["megatron_cfg.model.tensor_model_parallel_size=2 does not divide megatron_cfg.model.num_attention_heads=7; "
                        "choose a TP size that divides the number of heads"]
