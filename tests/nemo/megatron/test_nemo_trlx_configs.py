"""trlX's six NeMo Megatron YAMLs (tests/nemo/fixtures/trlx_nemo_configs, copied unchanged)
load and translate: interpolations resolved with NeMo's resolvers, NeMo 1's model keys mapped,
sequence parallelism / Transformer Engine / FP8 turned off with one warning line each where they
cannot run, and each one's model builds and runs once shrunk (by overriding after loading), in
the YAML's precision (bf16 weights in Megatron's Float16Module where it says O2).
Runs in the NeMo venv (omegaconf)."""

from pathlib import Path

import pytest
import torch
import yaml

from rlkit_core.errors import ConfigError
from rlkit_nemo.megatron_config import CONFIGS, find_megatron_yaml, load_megatron_cfg, translate

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "trlx_nemo_configs"
TRLX_YAMLS = ("megatron_1.3b.yaml", "megatron_2b.yaml", "megatron_20b.yaml", "megatron_65b.yaml",
              "sft_megatron_20b.yaml", "megatron_llama_cfg.yaml")
SP_TP1 = "megatron_cfg.model.sequence_parallel: needs tensor_model_parallel_size > 1 (here 1); turned off"
SP_NO_TE = ("megatron_cfg.model.sequence_parallel: needs Transformer Engine layers and Transformer Engine is not "
            "available here (no GPU or no transformer_engine); turned off")
SP_NOT_ASKED = ("megatron_cfg.model.sequence_parallel: needs Transformer Engine layers and the YAML does not ask for them "
                "(transformer_engine: true; NeMo 1's default is false); turned off")

# what each YAML says, as trlX wrote it: (TP, PP, devices x nodes), (micro, global batch, sequence),
# (layers, hidden, ffn, heads), precision / O2 -> weights dtype, optimizer, scheduler, warnings on a CPU
EXPECTED = {
    "megatron_1.3b.yaml": dict(
        parallel=(1, 1, 8, 1), data=(32, 256, 2048), arch=(24, 2048, 3072, 16), params="bf16",
        optim=(6e-5, 1e-6, 0.9, 0.95), sched=("CosineAnnealing", 0, 100000000, 5e-5, 200), eps=1e-5,
        arch_keys=dict(normalization="LayerNorm", activation="gelu", position_embedding_type="learned_absolute"),
        warnings=[SP_TP1], log=("ppo_sentiments_logs", "megatron_gpt_1.3b_ppo_sentiments", False), model_parallel_size=1),
    "megatron_2b.yaml": dict(
        parallel=(1, 1, 1, 1), data=(32, 256, 4096), arch=(24, 2048, 5440, 16), params="bf16",
        optim=(6e-6, 0.0, 0.9, 0.95), sched=("CosineAnnealing", 0, 30000, 5e-6, 200), eps=1e-5,
        arch_keys=dict(normalization="LayerNorm", layernorm_zero_centered_gamma=True, activation="swiglu", bias=False,
                       position_embedding_type="rope", rotary_percent=0.5, share_embeddings_and_output_weights=False),
        warnings=[], log=("ppo_sentiments_logs", "megatron_gpt_2b_ppo_sentiments", False), model_parallel_size=1),
    "megatron_20b.yaml": dict(
        parallel=(4, 1, 8, 4), data=(2, 64, 2048), arch=(44, 6144, 24576, 48), params="bf16",
        optim=(6e-5, 1e-6, 0.9, 0.95), sched=("CosineAnnealing", 0, 10000000, 5e-5, 200), eps=1e-5,
        arch_keys=dict(normalization="LayerNorm", activation="gelu", hidden_dropout=0.1, init_method_std=0.007,
                       activations_checkpoint_granularity="selective"),
        warnings=[SP_NO_TE], log=("ppo_sentiments_logs", "megatron_gpt_20b_ppo_sentiments", False), model_parallel_size=4),
    "megatron_65b.yaml": dict(
        parallel=(8, 4, 8, 16), data=(8, 128, 2048), arch=(80, 8192, 32768, 128), params="32",
        optim=(1.1e-4, 0.1, 0.9, 0.95), sched=("CosineAnnealing", 115, 12500, 1.1e-5, 1000), eps=1e-5,
        arch_keys=dict(activations_checkpoint_granularity="selective", activations_checkpoint_num_layers=1),
        warnings=[SP_NO_TE], log=(None, "megatron_gpt_70b", True), model_parallel_size=32),
    "sft_megatron_20b.yaml": dict(
        parallel=(4, 1, 8, 4), data=(4, 256, 1024), arch=(44, 6144, 24576, 48), params="32",
        optim=(5e-5, 1e-6, 0.9, 0.95), sched=("CosineAnnealing", 20, 0, 5e-6, 200), eps=1e-5,
        arch_keys=dict(normalization="LayerNorm"),
        warnings=[SP_NO_TE], log=("sft_sentiments_logs", "megatron_gpt_20b_sft_sentiments", True), model_parallel_size=4),
    "megatron_llama_cfg.yaml": dict(
        parallel=(4, 1, 8, 4), data=(1, 32, 2048), arch=(32, 4096, 11008, 32), params="bf16",
        optim=(1e-6, 0.0, 0.9, 0.95), sched=("CosineAnnealing", 0, 0, 1e-6, 200), eps=1e-6,
        arch_keys=dict(normalization="RMSNorm", activation="swiglu", bias=False, position_embedding_type="rope",
                       rotary_percent=1.0, megatron_legacy=True, padded_vocab_size=32000,
                       share_embeddings_and_output_weights=False),
        warnings=[SP_NO_TE], log=("ppo_sentiments_logs", "megatron_gpt_7b_ppo_sentiments", False), model_parallel_size=4),
}


@pytest.mark.parametrize("name", TRLX_YAMLS)
def test_each_trlx_yaml_translates_to_what_it_says(name):
    want = EXPECTED[name]
    raw = load_megatron_cfg(str(FIXTURES / name))
    assert raw["exp_manager"]["checkpoint_callback_params"]["model_parallel_size"] == want["model_parallel_size"]  # ${multiply:TP, PP}
    out = translate(str(FIXTURES / name), cpu=True)
    s, m = out["strategy"], out["model"]
    tp, pp, devices, nodes = want["parallel"]
    assert (s["tensor_model_parallel_size"], s["pipeline_model_parallel_size"]) == (tp, pp)
    assert (out["trainer"]["devices"], out["trainer"]["num_nodes"]) == (devices, nodes)
    assert s["sequence_parallel"] is False and m["sequence_parallel"] is False  # no Transformer Engine on a CPU
    assert m["transformer_engine"] is False
    assert out["warnings"] == want["warnings"]
    assert (out["data"]["micro_batch_size"], out["data"]["global_batch_size"], out["data"]["seq_len"]) == want["data"]
    assert (m["num_layers"], m["hidden_size"], m["ffn_hidden_size"], m["num_attention_heads"]) == want["arch"]
    assert isinstance(m["ffn_hidden_size"], int) and m["layernorm_epsilon"] == want["eps"]  # 1e-5 is a number, as in NeMo
    assert m["params_dtype"] == want["params"]
    assert out["precision"]["precision"] == "bf16-mixed" and out["optimizer"]["bf16"] is True
    assert out["precision"]["autocast_enabled"] is (want["params"] == "32")
    lr, wd, b1, b2 = want["optim"]
    o = out["optimizer"]
    assert (o["lr"], o["weight_decay"], o["adam_beta1"], o["adam_beta2"]) == pytest.approx((lr, wd, b1, b2))
    # distributed_fused_adam on the CPU: Megatron's distributed optimizer at one data-parallel rank
    # (the 2B YAML's one device), the plain one where gloo would need a reduce-scatter
    assert o["use_distributed_optimizer"] is (name == "megatron_2b.yaml")
    assert translate(str(FIXTURES / name))["optimizer"]["use_distributed_optimizer"] is True
    sched_name, warmup, constant, min_lr, max_steps = want["sched"]
    sc = out["scheduler"]
    assert (sc["name"], sc["warmup_steps"], sc["constant_steps"], sc["max_steps"]) == (sched_name, warmup, constant, max_steps)
    assert sc["min_lr"] == pytest.approx(min_lr)
    for key, value in want["arch_keys"].items():
        assert m[key] == value, key
    explicit, log_name, wandb = want["log"]
    assert (out["logger"]["explicit_log_dir"], out["logger"]["name"], out["logger"]["wandb"]) == (explicit, log_name, wandb)


def test_interpolations_resolve_in_a_plain_dict_and_in_an_omegaconf_config():
    from omegaconf import OmegaConf

    text = (FIXTURES / "megatron_20b.yaml").read_text()
    as_dict = yaml.safe_load(text)  # the ${multiply:...} strings as they are in the file
    assert as_dict["model"]["ffn_hidden_size"] == "${multiply:4, ${.hidden_size}}"
    assert translate(as_dict)["model"]["ffn_hidden_size"] == 24576
    trlx_style = OmegaConf.load(FIXTURES / "megatron_20b.yaml")  # what trlX handed its trainers
    assert translate(trlx_style)["model"]["ffn_hidden_size"] == 24576
    assert translate(trlx_style)["data"]["seq_len"] == 2048


def test_an_unresolvable_interpolation_is_one_line_naming_the_key():
    cfg = yaml.safe_load((FIXTURES / "megatron_20b.yaml").read_text())
    cfg["model"]["ffn_hidden_size"] = "${divide:4, ${.hidden_size}}"
    with pytest.raises(ConfigError) as err:
        translate(cfg)
    assert str(err.value).startswith("megatron_cfg.model.ffn_hidden_size: cannot resolve") and "\n" not in str(err.value)


@pytest.mark.parametrize("name", ["megatron_1.3b.yaml", "megatron_2b.yaml", "megatron_20b.yaml", "megatron_65b.yaml",
                                  "sft_megatron_20b.yaml", "megatron_20b"])
def test_trlx_bare_names_are_found_among_the_shipped_configs(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not found relative to the working folder
    path = Path(find_megatron_yaml(name))
    assert path.parent == Path(CONFIGS) and path.name == (name if name.endswith(".yaml") else name + ".yaml")
    assert translate(name, cpu=True)["strategy"]["tensor_model_parallel_size"] >= 1


def test_an_unknown_bare_name_lists_the_shipped_configs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        translate("megatron_7b.yaml")
    message = str(err.value)
    assert "megatron_7b.yaml: Megatron YAML not found" in message and "megatron_20b.yaml" in message and "\n" not in message


def test_sequence_parallel_and_transformer_engine_are_honoured_where_they_can_run():
    # a GPU with Transformer Engine: TE's layers only when asked for (NeMo 1's default is off)
    out = translate(str(FIXTURES / "megatron_20b.yaml"), te=True)
    assert out["strategy"]["sequence_parallel"] is False and out["model"]["transformer_engine"] is False
    assert out["warnings"] == [SP_NOT_ASKED]
    cfg = yaml.safe_load((FIXTURES / "megatron_20b.yaml").read_text())
    cfg["model"]["transformer_engine"] = True
    out = translate(cfg, te=True)
    assert out["strategy"]["sequence_parallel"] is True and out["model"]["transformer_engine"] is True
    assert out["warnings"] == []
    tp1 = translate(str(FIXTURES / "megatron_1.3b.yaml"), te=True)
    assert tp1["strategy"]["sequence_parallel"] is False and tp1["warnings"] == [SP_TP1]
    no_te = translate(str(FIXTURES / "megatron_2b.yaml"), te=True)  # transformer_engine: false in the YAML
    assert no_te["model"]["transformer_engine"] is False and no_te["warnings"] == []


def test_transformer_engine_and_fp8_asked_for_without_it_warn_once_each():
    cfg = yaml.safe_load((FIXTURES / "megatron_2b.yaml").read_text())
    cfg["model"].update(transformer_engine=True, fp8=True, tensor_model_parallel_size=1)
    out = translate(cfg, cpu=True)
    assert [line.split(":")[0] for line in out["warnings"]] == ["megatron_cfg.model.transformer_engine", "megatron_cfg.model.fp8"]
    assert all("turned off" in line and "\n" not in line for line in out["warnings"])
    assert out["model"]["transformer_engine"] is False and out["model"]["fp8"] is None
    honoured = translate(cfg, te=True)
    assert honoured["warnings"] == [] and honoured["model"]["fp8"] == "hybrid"


@pytest.mark.usefixtures("megatron_cpu")
@pytest.mark.parametrize("name", TRLX_YAMLS)
def test_each_trlx_yamls_model_builds_and_runs_once_shrunk(name):
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

    from rlkit_nemo import precision
    from rlkit_nemo.models.from_yaml import build_gpt, transformer_config
    from rlkit_nemo.models.gpt import causal_padding_mask

    model = translate(str(FIXTURES / name), cpu=True)["model"]
    model.update(num_layers=2, hidden_size=32, ffn_hidden_size=48, num_attention_heads=4, encoder_seq_length=16,
                 max_position_embeddings=16, tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
                 activations_checkpoint_granularity=None)  # the YAML's precision: bf16 weights under O2
    ps.destroy_model_parallel()
    ps.initialize_model_parallel(1, 1)
    model_parallel_cuda_manual_seed(0)
    config = transformer_config(model, cpu=True)
    assert config.gated_linear_unit is (model["activation"] == "swiglu")
    assert config.normalization == model["normalization"] and config.layernorm_epsilon == model["layernorm_epsilon"]
    gpt = build_gpt(model, 64, cpu=True)
    if model["position_embedding_type"] == "rope":
        assert gpt.rotary_pos_emb.inv_freq.numel() == int(8 * model.get("rotary_percent", 1.0)) // 2
    gpt = precision.wrap(gpt).eval()  # Megatron's Float16Module where the YAML says O2
    assert {p.dtype for p in gpt.parameters()} == {torch.bfloat16 if model["params_dtype"] == "bf16" else torch.float32}
    ids = torch.randint(0, 64, (2, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = gpt(ids, torch.arange(10).repeat(2, 1), causal_padding_mask(torch.ones_like(ids)))
    assert logits.shape == (2, 10, 64) and torch.isfinite(logits).all()
