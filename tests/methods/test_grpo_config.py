"""GRPOConfig and RLOOConfig: TRL's names and defaults, TRL's spellings, one-line errors;
the rollout store keeps groups whole and masks truncated samples."""

import pytest
import torch
import yaml

from rlkit_core import ConfigError, TRLConfig
from rlkit_methods import GRPOConfig, RLOOConfig, default_grpo_config, default_rloo_config
from rlkit_methods.grpo.store import GroupElement, GroupRolloutStorage


def test_trl_defaults():
    grpo, rloo = GRPOConfig(), RLOOConfig()
    assert (grpo.num_generations, grpo.beta, grpo.epsilon, grpo.epsilon_high) == (8, 0.0, 0.2, None)
    assert (grpo.loss_type, grpo.scale_rewards, grpo.num_iterations, grpo.mask_truncated_completions) == ("dapo", "group", 1, False)
    assert (rloo.num_generations, rloo.beta, rloo.normalize_advantages, rloo.reward_clip_range) == (2, 0.05, False, None)
    assert grpo.upper_epsilon == 0.2 and GRPOConfig(epsilon_high=0.28).upper_epsilon == 0.28
    assert grpo.use_bias_correction_kl is True  # TRL 1.16's default: the KL term times the ratio


@pytest.mark.parametrize("factory", [default_grpo_config, default_rloo_config])
def test_default_configs_round_trip(methods_host, factory):
    config = factory()
    assert TRLConfig.from_dict(config.to_dict()) == config
    assert TRLConfig.from_dict(yaml.safe_load(config.to_yaml())) == config


@pytest.mark.parametrize("value, mode", [(True, "group"), (False, "none"), ("batch", "batch")])
def test_scale_rewards_takes_trls_spellings(methods_host, value, mode):
    raw = default_grpo_config().to_dict()
    raw["method"]["scale_rewards"] = value
    assert TRLConfig.from_dict(raw).method.scale_rewards == mode


@pytest.mark.parametrize("section, message", [
    ({"num_rollouts": 30, "num_generations": 8}, "method.num_rollouts: 30 is not a multiple of num_generations=8"),
    ({"chunk_size": 12, "num_generations": 8}, "method.chunk_size: 12 is not a multiple"),
    ({"num_generations": 1}, "method.num_generations: must be >= 2"),
    ({"loss_type": "cispo"}, "method.loss_type: must be one of"),
    ({"scale_rewards": "groups"}, "method.scale_rewards: must be one of"),
    ({"reward_weights": [1.0, "x"]}, "method.reward_weights"),
    ({"num_generatons": 4}, "did you mean num_generations"),
])
def test_bad_fields_are_one_line_errors(methods_host, section, message):
    raw = default_grpo_config().to_dict()
    raw["method"].update(section)
    with pytest.raises(ConfigError, match=message):
        TRLConfig.from_dict(raw)


def test_dr_grpo_needs_a_completion_length(methods_host):
    raw = default_grpo_config().to_dict()
    raw["method"].update(loss_type="dr_grpo", gen_kwargs={"do_sample": True})
    with pytest.raises(ConfigError, match="method.loss_type: dr_grpo divides by max_completion_length"):
        TRLConfig.from_dict(raw)


def test_rloo_reward_clip_range_is_two_numbers(methods_host):
    raw = default_rloo_config().to_dict()
    raw["method"]["reward_clip_range"] = [-1.0]
    with pytest.raises(ConfigError, match="method.reward_clip_range: must be a list of 2 finite numbers"):
        TRLConfig.from_dict(raw)


@pytest.mark.parametrize("name, cls", [("GRPOConfig", GRPOConfig), ("grpo", GRPOConfig), ("rlooconfig", RLOOConfig)])
def test_method_names_resolve(methods_host, name, cls):
    raw = default_grpo_config().to_dict()
    raw["method"] = {"name": name}
    assert type(TRLConfig.from_dict(raw).method) is cls
    assert methods_host.registry.get("method", name).mode == "online"


def element(prompt, response, advantage, truncated=False):
    return GroupElement(query_tensor=torch.tensor(prompt), response_tensor=torch.tensor(response),
                        advantage=torch.tensor(advantage), truncated=truncated)


def test_store_collates_like_ppo_and_masks_truncated_samples():
    store = GroupRolloutStorage(pad_token_id=0, mask_truncated=True)
    store.push([element([5, 6], [7, 8, 9], 1.0), element([5], [7], -1.0, truncated=True)])
    batch = store.collate(store.history)
    assert batch.query_tensors.tolist() == [[5, 6], [0, 5]]  # prompts left-padded
    assert batch.response_tensors.tolist() == [[7, 8, 9], [7, 0, 0]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1], [0, 1, 1, 0, 0]]
    assert batch.position_ids[1].tolist()[1:3] == [0, 1]  # positions follow the real tokens
    assert batch.response_mask.tolist() == [[1, 1, 1], [0, 0, 0]]  # the truncated sample is out of the loss
    assert batch.advantages.tolist() == [1.0, -1.0] and batch.old_logprobs is None
    unmasked = GroupRolloutStorage(pad_token_id=0).collate(store.history)
    assert unmasked.response_mask.tolist() == [[1, 1, 1], [1, 0, 0]]


def test_store_keeps_old_logprobs_for_all_or_none():
    store = GroupRolloutStorage(pad_token_id=0)
    a, b = element([1], [2, 3], 0.5), element([1], [2], -0.5)
    a.old_logprobs, b.old_logprobs = torch.tensor([-1.0, -2.0]), torch.tensor([-3.0])
    assert store.collate([a, b]).old_logprobs.tolist() == [[-1.0, -2.0], [-3.0, 0.0]]
    b.old_logprobs = None
    with pytest.raises(ValueError, match="old_logprobs must be kept for every rollout"):
        store.collate([a, b])
