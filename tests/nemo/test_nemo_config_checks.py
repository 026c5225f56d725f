"""rlkit config validate checks what the NeMo engine would refuse before a model loads
(rlkit-nemo's rlkit_check_config): a trainer_kwargs key, the Megatron YAML of
train.trainer_kwargs.megatron_cfg. Runs in the main venv (no megatron-core, no omegaconf):
the checks need neither; trlX's own NeMo YAMLs validate in
tests/nemo/megatron/test_nemo_validate_trlx_yamls.py."""

import sys
from pathlib import Path

import pytest
import yaml

from rlkit_core.cli import main
from rlkit_methods import default_ppo_config
from rlkit_nemo.megatron_config import CONFIGS

TINY = Path(CONFIGS) / "megatron_tiny_cpu.yaml"  # no interpolations: loads without omegaconf


def write_config(tmp_path, trainer="NeMoPPOTrainer", **trainer_kwargs):
    path = tmp_path / "config.yml"
    config = default_ppo_config().evolve(train=dict(trainer=trainer, trainer_kwargs=trainer_kwargs))
    config.evolve(model=dict(model_path="gpt2"), tokenizer=dict(tokenizer_path="gpt2")).save_yaml(path)
    return path


def validate(capsys, path):
    code = main(["config", "validate", str(path)])
    return code, " ".join(capsys.readouterr().err.split())  # the console wraps long lines


def test_checked_where_megatron_core_is_missing_too(tmp_path, rlkit_host, monkeypatch, capsys):
    """A config is checked on a machine that will not run it (a run there is refused by the
    trainer, with what to install)."""
    monkeypatch.setitem(sys.modules, "megatron", None)
    monkeypatch.setitem(sys.modules, "megatron.core", None)
    code, err = validate(capsys, write_config(tmp_path, megatron_cfg=str(TINY)))
    assert code == 0 and err.startswith("ok:"), err
    code, err = validate(capsys, write_config(tmp_path, megatron_cfg="no/such/megatron.yaml"))
    assert code == 2 and err.startswith("error: megatron_cfg: no/such/megatron.yaml: Megatron YAML not found"), err


def test_other_backends_are_not_checked(tmp_path, rlkit_host, capsys):
    code, err = validate(capsys, write_config(tmp_path, trainer="AcceleratePPOTrainer"))
    assert code == 0 and err.startswith("ok:"), err


def test_a_megatron_yaml_that_loads_validates(tmp_path, rlkit_host, capsys):
    code, err = validate(capsys, write_config(tmp_path, megatron_cfg=str(TINY)))
    assert code == 0 and err.startswith("ok:"), err
    # a shipped config's bare name, as trlX's examples wrote megatron_cfg="megatron_20b.yaml"
    code, err = validate(capsys, write_config(tmp_path, megatron_cfg="megatron_tiny_cpu.yaml", pretrained_model=None))
    assert code == 0 and err.startswith("ok:"), err


@pytest.mark.parametrize("kwargs, problem", [
    ({}, "train.trainer_kwargs.megatron_cfg: missing; the NeMo engine needs a Megatron YAML"),
    ({"megatron_cfg": str(TINY), "megatron_config": "x"}, "train.trainer_kwargs.megatron_config: not an argument of the NeMo engine"),
    ({"megatron_cfg": "no/such/megatron.yaml"}, "megatron_cfg: no/such/megatron.yaml: Megatron YAML not found"),
])
def test_what_the_engine_refuses_is_one_line(kwargs, problem, tmp_path, rlkit_host, capsys):
    code, err = validate(capsys, write_config(tmp_path, **kwargs))
    assert code == 2 and err.startswith(f"error: {problem}") and err.count("error:") == 1, err


@pytest.mark.parametrize("change, problem", [
    ({"tensor_model_parallel_size": 3}, "megatron_cfg.model.tensor_model_parallel_size=3 does not divide megatron_cfg.model.num_attention_heads=4"),
    ({"micro_batch_size": 3, "global_batch_size": 8}, "megatron_cfg.model.global_batch_size=8 is not a multiple of micro_batch_size"),
    ({"normalization": "groupnorm"}, "megatron_cfg.model.normalization: 'groupnorm' is not one of"),
])
def test_a_megatron_yaml_the_engine_refuses_is_one_line(change, problem, tmp_path, rlkit_host, capsys):
    cfg = yaml.safe_load(TINY.read_text())
    cfg["model"].update(change)
    (tmp_path / "megatron.yaml").write_text(yaml.safe_dump(cfg))
    code, err = validate(capsys, write_config(tmp_path, megatron_cfg=str(tmp_path / "megatron.yaml")))
    assert code == 2 and err.startswith(f"error: {problem}") and err.count("error:") == 1, err


def test_sizes_are_checked_on_the_smallest_world_the_layout_runs_on(tmp_path, rlkit_host, capsys):
    """The engine runs a YAML on the processes torchrun starts (devices is set to the world
    size), so the YAML's own devices: 1 under TP=2 is no error here."""
    cfg = yaml.safe_load(TINY.read_text())
    cfg["trainer"]["devices"] = 1
    (tmp_path / "megatron.yaml").write_text(yaml.safe_dump(cfg))
    code, err = validate(capsys, write_config(tmp_path, megatron_cfg=str(tmp_path / "megatron.yaml")))
    assert code == 0 and err.startswith("ok:"), err


def test_interpolations_without_omegaconf_say_what_to_install(tmp_path, rlkit_host, capsys):
    (tmp_path / "megatron.yaml").write_text(TINY.read_text().replace("ffn_hidden_size: 64", "ffn_hidden_size: ${multiply:2, 32}"))
    assert "${multiply" in (tmp_path / "megatron.yaml").read_text()
    code, err = validate(capsys, write_config(tmp_path, megatron_cfg=str(tmp_path / "megatron.yaml")))
    try:
        import omegaconf  # noqa: F401  (the NeMo venv: resolved as NeMo does)
    except ImportError:
        assert code == 2 and "has ${...} interpolations, which need omegaconf; install rlkit-nemo[nemo]" in err, err
        assert err.count("error:") == 1
    else:
        assert code == 0, err
