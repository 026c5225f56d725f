"""Megatron YAML -> NeMo 2 trainer arguments, and the one-line errors for bad input.
(Runs without NeMo: the translation is pure Python; the NeMo objects are tested in megatron/.)"""

import subprocess
import sys
from importlib.resources import files

import pytest
import yaml

from rlkit_core.errors import ConfigError
from rlkit_nemo import megatron_trainer
from rlkit_nemo.megatron_config import translate

CONFIGS = files("rlkit_nemo") / "configs"


def shipped(name):
    return yaml.safe_load((CONFIGS / name).read_text())


def test_shipped_yamls_translate_to_their_parallel_layouts():
    tiny, b13, b20 = (translate(str(CONFIGS / n), te=False) for n in ("megatron_tiny_cpu.yaml", "megatron_1.3b.yaml", "megatron_20b.yaml"))
    assert (tiny["strategy"]["tensor_model_parallel_size"], tiny["strategy"]["pipeline_model_parallel_size"]) == (2, 1)
    assert tiny["precision"] is None and tiny["optimizer"]["bf16"] is False
    assert (b20["strategy"]["tensor_model_parallel_size"], b20["strategy"]["pipeline_model_parallel_size"]) == (8, 2)
    assert b20["strategy"]["sequence_parallel"] is False and b20["model"]["transformer_engine"] is False
    assert b20["warnings"] == []
    # sequence parallelism runs with Transformer Engine's layers, asked for and available
    sp = shipped("megatron_20b.yaml")
    sp["model"].update(sequence_parallel=True, transformer_engine=True)
    with_te = translate(sp, te=True)
    assert with_te["strategy"]["sequence_parallel"] is True and with_te["model"]["transformer_engine"] is True
    assert with_te["warnings"] == []
    assert translate(sp, te=False)["strategy"]["sequence_parallel"] is False
    assert b20["trainer"]["num_nodes"] == 4 and b20["trainer"]["devices"] == 8
    assert b20["model"]["activations_checkpoint_granularity"] == "full"
    assert b13["data"] == {"micro_batch_size": 32, "global_batch_size": 256, "seq_len": 2048}
    assert b13["optimizer"]["use_distributed_optimizer"] is True and b13["optimizer"]["lr"] == 6.0e-5
    assert b13["scheduler"]["name"] == "CosineAnnealing" and b13["scheduler"]["max_steps"] == 200
    assert b13["logger"]["explicit_log_dir"] == "runs/megatron_1.3b"


def test_megatron_amp_o2_keeps_half_weights_otherwise_fp32_under_autocast():
    cfg = shipped("megatron_1.3b.yaml")
    o2 = translate(cfg)
    assert o2["precision"]["params_dtype"] == "bfloat16" and o2["precision"]["autocast_enabled"] is False
    assert o2["model"]["params_dtype"] == "bf16"
    cfg["model"]["megatron_amp_O2"] = False
    amp = translate(cfg)
    assert amp["precision"]["params_dtype"] == "float32" and amp["precision"]["autocast_dtype"] == "bfloat16"
    assert amp["precision"]["autocast_enabled"] is True and amp["model"]["params_dtype"] == "32"
    cfg["trainer"]["precision"] = 16
    assert translate(cfg)["precision"]["precision"] == "16-mixed" and translate(cfg)["optimizer"]["fp16"] is True


def test_cpu_turns_gradient_clipping_off():
    cfg = shipped("megatron_1.3b.yaml")
    assert translate(cfg)["optimizer"]["clip_grad"] == 1.0
    assert translate(cfg, cpu=True)["optimizer"]["clip_grad"] == 0.0
    assert translate(cfg, cpu=True)["trainer"]["accelerator"] == "cpu"


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda c: c["model"].update(tensor_model_parallel_size=3), "tensor_model_parallel_size=3 does not divide megatron_cfg.model.num_attention_heads=16"),
        (lambda c: c["model"].update(tensor_model_parallel_size=4) or c["trainer"].update(devices=6), "TP=4 x PP=2 = 8 does not divide the world size 6"),
        (lambda c: c["model"].update(pipeline_model_parallel_size=5, tensor_model_parallel_size=1) or c["trainer"].update(devices=5), "does not divide megatron_cfg.model.num_layers=24"),
        (lambda c: c["model"].update(global_batch_size=100), "global_batch_size=100 is not a multiple"),
        (lambda c: c["trainer"].update(precision="fp8"), "megatron_cfg.trainer.precision: 'fp8'"),
        (lambda c: c["model"].update(activations_checkpoint_granularity="some"), "activations_checkpoint_granularity: 'some'"),
        (lambda c: c["model"]["optim"].update(name="lamb"), "megatron_cfg.model.optim.name: 'lamb'"),
        (lambda c: c["model"].pop("num_layers"), "megatron_cfg.model.num_layers: missing"),
        (lambda c: c.update(modle={}), "megatron_cfg.modle: unknown section"),
    ],
)
def test_bad_megatron_config_is_one_clear_line(edit, message):
    cfg = shipped("megatron_1.3b.yaml")
    cfg["model"]["pipeline_model_parallel_size"] = 2
    cfg["trainer"]["devices"] = 8
    edit(cfg)
    with pytest.raises(ConfigError) as err:
        translate(cfg)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_missing_megatron_yaml_names_the_path(tmp_path):
    with pytest.raises(ConfigError, match=r"megatron_cfg: .*nope\.yaml: Megatron YAML not found"):
        translate(str(tmp_path / "nope.yaml"))


def test_without_nemo_the_trainer_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "nemo", None)  # import nemo -> ImportError, as without NeMo
    monkeypatch.setitem(sys.modules, "nemo.lightning", None)
    with pytest.raises(ConfigError, match=r"megatron_trainer needs NeMo.*install rlkit-nemo\[nemo\]"):
        megatron_trainer(str(CONFIGS / "megatron_tiny_cpu.yaml"))


def test_importing_the_plugin_imports_neither_torch_nor_nemo_nor_megatron():
    code = (
        "import sys, rlkit_nemo, rlkit_nemo.plugin; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'nemo', 'megatron'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
