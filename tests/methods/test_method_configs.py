"""Method configs: registration, trlX names and defaults, strict validation."""

import attrs
import pytest
import yaml

from rlkit_core import ConfigError, TRLConfig
from rlkit_core.testing import check_plugin

import rlkit_methods.plugin as plugin
from rlkit_methods import (
    AdaptiveKLController,
    FixedKLController,
    ILQLConfig,
    PPOConfig,
    SFTConfig,
    default_ilql_config,
    default_ppo_config,
    default_sft_config,
)


def test_plugin_registers_cleanly_and_every_import_string_resolves():
    provides = check_plugin(plugin)
    assert provides["method"] == ["dpo", "grpo", "ilql", "logged_pg", "ppo", "reward_model", "rft", "rloo", "sft"]
    assert {"PromptPipeline", "file"} <= set(provides["pipeline"])
    assert {"python", "vader", "randomwalks", "randomwalks_metric"} <= set(provides["reward"])


@pytest.mark.parametrize(
    "name, cls, mode",
    [("PPOConfig", PPOConfig, "online"), ("ppoconfig", PPOConfig, "online"), ("ppo", PPOConfig, "online"),
     ("ILQLConfig", ILQLConfig, "offline"), ("ilqlconfig", ILQLConfig, "offline"),
     ("SFTConfig", SFTConfig, "supervised"), ("sftconfig", SFTConfig, "supervised")],
)
def test_method_names_resolve_case_insensitively(methods_host, name, cls, mode):
    spec = methods_host.registry.get("method", name)
    assert spec.mode == mode
    raw = default_ppo_config().to_dict()
    raw["method"] = {"name": name}
    config = TRLConfig.from_dict(raw)
    assert type(config.method) is cls


@pytest.mark.parametrize("factory", [default_ppo_config, default_ilql_config, default_sft_config])
def test_default_configs_round_trip_through_dict_and_yaml(methods_host, factory):
    config = factory()
    assert TRLConfig.from_dict(config.to_dict()) == config
    assert TRLConfig.from_dict(yaml.safe_load(config.to_yaml())) == config
    # offline model source, not a hub name
    assert config.model.model_path == config.tokenizer.tokenizer_path == "smollm2-135m"
    assert config.train.tracker is None


def test_default_configs_keep_trlx_values():
    ppo, ilql, sft = default_ppo_config(), default_ilql_config(), default_sft_config()
    assert (ppo.train.seq_length, ppo.train.batch_size, ppo.train.trainer) == (1024, 32, "AcceleratePPOTrainer")
    assert (ppo.method.num_rollouts, ppo.method.chunk_size, ppo.method.init_kl_coef) == (128, 128, 0.001)
    assert (ppo.method.gamma, ppo.method.lam, ppo.method.cliprange_reward) == (1.0, 0.95, 10.0)
    assert ppo.model.num_layers_unfrozen == 2 and ppo.optimizer.kwargs["lr"] == 3e-5
    assert (ilql.method.tau, ilql.method.gamma, ilql.method.alpha, ilql.method.steps_for_target_q_sync) == (0.7, 0.99, 0.001, 5)
    assert ilql.method.gen_kwargs == dict(max_new_tokens=56, top_k=20, beta=1, temperature=1.0)
    assert (ilql.train.seq_length, ilql.train.batch_size, ilql.train.trainer) == (64, 128, "AccelerateILQLTrainer")
    assert (sft.train.batch_size, sft.train.trainer, sft.optimizer.kwargs["lr"]) == (8, "AccelerateSFTTrainer", 1e-4)


def test_trlx_yaml_method_sections_load_unchanged(methods_host):
    ppo_yaml = """
name: "PPOConfig"
num_rollouts: 128
chunk_size: 128
ppo_epochs: 4
init_kl_coef: 0.05
target: 6
horizon: 10000
gamma: 1
lam: 0.95
cliprange: 0.2
cliprange_value: 0.2
vf_coef: 1
scale_reward: "ignored"
ref_mean: null
ref_std: null
cliprange_reward: 10
gen_kwargs: {max_new_tokens: 40, top_k: 0, top_p: 1.0, do_sample: true}
"""
    ilql_yaml = """
name: "ilqlconfig"
tau: 0.7
gamma: 0.99
cql_scale: 0.1
awac_scale: 1
alpha: 0.001
beta: 0
steps_for_target_q_sync: 5
two_qs: true
gen_kwargs: {max_new_tokens: 56, top_k: 20, beta: 4, temperature: 1.0}
"""
    raw = default_ppo_config().to_dict()
    raw["method"] = yaml.safe_load(ppo_yaml)
    ppo = TRLConfig.from_dict(raw).method
    assert isinstance(ppo, PPOConfig) and ppo.target == 6.0 and ppo.init_kl_coef == 0.05
    assert isinstance(ppo.make_kl_controller(), AdaptiveKLController)
    raw["method"] = yaml.safe_load(ilql_yaml)
    ilql = TRLConfig.from_dict(raw).method
    assert isinstance(ilql, ILQLConfig) and ilql.gen_kwargs["beta"] == 4


def test_misspelled_and_out_of_range_keys_are_errors(methods_host):
    raw = default_ilql_config().to_dict()
    raw["method"]["tua"] = 0.5
    raw["method"]["gamma"] = 1.5
    with pytest.raises(ConfigError) as info:
        TRLConfig.from_dict(raw)
    message = str(info.value)
    assert "method.tua: unknown key; did you mean tau?" in message
    assert "method.gamma: must be in [0, 1], got 1.5" in message


@pytest.mark.parametrize(
    "cls, field, value",
    [(ILQLConfig, "tau", 1.0), (ILQLConfig, "tau", 0.0), (ILQLConfig, "alpha", 0.0), (ILQLConfig, "steps_for_target_q_sync", 0),
     (PPOConfig, "cliprange", 0.0), (PPOConfig, "lam", 1.2), (PPOConfig, "ppo_epochs", 0), (PPOConfig, "scale_reward", "bogus"),
     (PPOConfig, "init_kl_coef", float("nan")), (PPOConfig, "target", -1.0)],
)
def test_evolve_validates(cls, field, value):
    with pytest.raises(ValueError, match=f"^{field}: must be"):
        attrs.evolve(cls(), **{field: value})


def test_kl_controller_choice_follows_target():
    assert isinstance(attrs.evolve(PPOConfig(), target=None).make_kl_controller(), FixedKLController)
    controller = attrs.evolve(PPOConfig(), target=6.0, init_kl_coef=0.1).make_kl_controller()
    assert isinstance(controller, AdaptiveKLController) and controller.value == 0.1
