"""PPO policy: the reference equals the initial policy exactly, and only the intended
parameters train, for num_layers_unfrozen in {-1, 0, 2} (trlX's -1 reference was wrong)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import transformers
from tiny_models import build, left_padded

from rlkit_accelerate.models import CausalLMWithValueHead, position_ids_from_mask
from rlkit_core.errors import ConfigError

SETTINGS = [(-1, 0), (0, 0), (2, 0), (1, 2), (0, 3)]  # (num_layers_unfrozen, num_value_layers_unfrozen)


def plain_logits(model, input_ids, attention_mask):
    position_ids = position_ids_from_mask(attention_mask)
    return model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
@pytest.mark.parametrize("unfrozen,value_layers", SETTINGS)
def test_reference_equals_policy_at_step_zero(arch, unfrozen, value_layers):
    input_ids, attention_mask = left_padded()
    base = build(arch)
    expected = plain_logits(base.eval(), input_ids, attention_mask)
    policy = CausalLMWithValueHead(base, num_layers_unfrozen=unfrozen, num_value_layers_unfrozen=value_layers).eval()

    out = policy(input_ids, attention_mask, return_hidden=True)
    reference = policy.forward_reference(input_ids, attention_mask)
    assert torch.equal(out.logits, expected)  # the split policy is the HF model, bit for bit
    assert torch.equal(F.log_softmax(reference, -1), F.log_softmax(out.logits, -1))
    assert (reference - out.logits).abs().max().item() == 0
    assert out.values.shape == (3, 9) and out.hidden_states.shape == (3, 9, 32)

    # the trunk computed once serves the policy and the reference
    trunk = policy.forward_trunk(input_ids, attention_mask)
    assert torch.equal(policy(trunk=trunk).logits, out.logits)
    assert torch.equal(policy(trunk=trunk).values, out.values)
    assert torch.equal(policy.forward_reference(input_ids, attention_mask, trunk=trunk), reference)


@pytest.mark.parametrize("unfrozen", [-1, 2])
def test_score_rollout_without_the_policy_gives_the_same_reference_and_trunk(unfrozen):
    input_ids, attention_mask = left_padded()
    policy = CausalLMWithValueHead(build("gpt2"), num_layers_unfrozen=unfrozen, value_head=False).eval()
    query, q_mask, response, r_mask = input_ids[:, :5], attention_mask[:, :5], input_ids[:, 5:], attention_mask[:, 5:]
    out, reference = policy.score_rollout(query, q_mask, response, r_mask)
    skipped, same = policy.score_rollout(query, q_mask, response, r_mask, policy=False)
    assert skipped.logits is None and skipped.values is None  # the policy's top never ran
    assert torch.equal(same, reference) and torch.equal(skipped.trunk_hidden, out.trunk_hidden)
    assert torch.equal(reference, out.logits)  # step 0: the reference is the policy


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_the_trunk_kept_from_sampling_stands_in_for_a_second_trunk_pass(arch, monkeypatch):
    input_ids, attention_mask = left_padded()
    policy = CausalLMWithValueHead(build(arch), num_layers_unfrozen=2, value_head=False).eval()
    monkeypatch.setattr(policy, "caches_trunk", lambda: True)  # eval mode: no dropout runs
    torch.manual_seed(0)
    out = policy.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=5, do_sample=True,
                          top_k=0, pad_token_id=0)
    Q = input_ids.shape[1]
    response, r_mask = out[:, Q:], torch.ones_like(out[:, Q:])
    r_mask[0, 3:] = 0  # row 0's response ended early (EOS): right padding
    joined, mask = torch.cat([input_ids, response], 1), torch.cat([attention_mask, r_mask], 1)
    kept = policy._sampled
    full = policy.forward_trunk(joined, mask)
    trunk = policy.sampled_trunk(joined, mask)
    real = mask.bool() & (torch.arange(mask.shape[1]) < mask.shape[1] - 1)  # the last token was never fed
    torch.testing.assert_close(trunk.hidden[real], full.hidden[real], atol=1e-5, rtol=1e-5)
    assert policy.sampled_trunk(joined, mask) is None  # one use
    # score_rollout reads it: the reference still equals the policy exactly, log-probs as a full pass
    policy._sampled = kept
    sampled, reference = policy.score_rollout(input_ids, attention_mask, response, r_mask)
    again, _ = policy.score_rollout(input_ids, attention_mask, response, r_mask)  # nothing kept: the full trunk
    assert torch.equal(sampled.logits, reference)
    torch.testing.assert_close(sampled.logits[r_mask.bool()], again.logits[r_mask.bool()], atol=1e-5, rtol=1e-5)
    # other ids (or another prompt padding) never read it; beam search keeps nothing
    policy._sampled = kept
    assert policy.sampled_trunk(joined.flip(0), mask.flip(0)) is None
    policy.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=3, num_beams=2, pad_token_id=0)
    assert policy._sampled is None


@pytest.mark.parametrize("arch", ["qwen2", "gpt_neox", "opt", "gemma"])
def test_reference_equals_policy_other_architectures(arch):
    input_ids, attention_mask = left_padded()
    for unfrozen in (-1, 1):
        policy = CausalLMWithValueHead(build(arch, num_layers=3), num_layers_unfrozen=unfrozen).eval()
        logits = policy(input_ids, attention_mask).logits
        assert torch.equal(policy.forward_reference(input_ids, attention_mask), logits), (arch, unfrozen)


# parameters expected to change after one step, by name prefix (written out, not derived)
TRAINABLE = {
    ("gpt2", -1, 0): ["transformer.", "lm_head."],  # lm_head is tied to transformer.wte
    ("gpt2", 0, 0): ["transformer.ln_f."],
    ("gpt2", 2, 0): ["transformer.h.2.", "transformer.h.3.", "transformer.ln_f."],
    ("gpt2", 1, 2): ["transformer.h.3.", "transformer.ln_f."],
    ("gpt2", 0, 3): ["transformer.ln_f."],
    ("llama", -1, 0): ["model.", "lm_head."],
    ("llama", 0, 0): ["model.norm.", "lm_head."],
    ("llama", 2, 0): ["model.layers.2.", "model.layers.3.", "model.norm.", "lm_head."],
    ("llama", 1, 2): ["model.layers.3.", "model.norm.", "lm_head."],
    ("llama", 0, 3): ["model.norm.", "lm_head."],
}


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
@pytest.mark.parametrize("unfrozen,value_layers", SETTINGS)
def test_only_intended_parameters_change(arch, unfrozen, value_layers):
    input_ids, attention_mask = left_padded()
    policy = CausalLMWithValueHead(build(arch), num_layers_unfrozen=unfrozen, num_value_layers_unfrozen=value_layers)
    policy.eval()  # no dropout, so the before/after logits compare exactly
    initial_logits = policy(input_ids, attention_mask).logits.detach()
    before = {name: p.detach().clone() for name, p in policy.named_parameters(remove_duplicate=False)}

    optimizer = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=1e-2)
    out = policy(input_ids, attention_mask)
    generator = torch.Generator().manual_seed(2)
    loss = (out.logits * torch.randn(out.logits.shape, generator=generator)).sum() + (
        out.values * torch.randn(out.values.shape, generator=generator)
    ).sum()
    loss.backward()
    optimizer.step()

    changed = {name for name, p in policy.named_parameters(remove_duplicate=False) if not torch.equal(p, before[name])}
    base_prefixes = tuple("base_model." + prefix for prefix in TRAINABLE[arch, unfrozen, value_layers])
    heads = ("v_head.", "value_branch.") if value_layers else ("v_head.",)
    intended = {name for name in before if name.startswith(base_prefixes + heads)}
    assert changed == intended
    assert not any(name.startswith("reference.") for name in changed)

    # the reference still computes the initial policy; the policy moved
    after = policy(input_ids, attention_mask).logits
    assert torch.equal(policy.forward_reference(input_ids, attention_mask), initial_logits)
    assert not torch.equal(after, initial_logits)


def test_reference_never_uses_dropout():
    input_ids, attention_mask = left_padded()
    policy = CausalLMWithValueHead(build("gpt2"), num_layers_unfrozen=-1)
    expected = policy.eval()(input_ids, attention_mask).logits
    policy.train()
    assert policy.base_model.training and not policy.reference.training
    assert torch.equal(policy.forward_reference(input_ids, attention_mask), expected)
    assert not torch.equal(policy(input_ids, attention_mask).logits, expected)  # the policy does drop out


@pytest.mark.parametrize("field,value", [("num_layers_unfrozen", 5), ("num_layers_unfrozen", -2), ("num_value_layers_unfrozen", -1)])
def test_out_of_range_layers_are_config_errors(field, value):
    with pytest.raises(ConfigError, match=f"model.{field}: {value} is out of range"):
        CausalLMWithValueHead(build("gpt2"), **{field: value})


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_save_pretrained_loads_in_plain_transformers(arch, tmp_path):
    input_ids, attention_mask = left_padded()
    policy = CausalLMWithValueHead(build(arch), num_layers_unfrozen=1, num_value_layers_unfrozen=1).eval()
    with torch.no_grad():
        for p in policy.v_head.parameters():
            p.add_(0.5)  # heads that differ from a fresh initialisation
    policy.save_pretrained(tmp_path)

    loaded, info = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".safetensors") == ["model.safetensors", "value_head.safetensors"]
    assert torch.equal(plain_logits(loaded.eval(), input_ids, attention_mask), policy(input_ids, attention_mask).logits)

    restored = CausalLMWithValueHead.from_pretrained(tmp_path, num_layers_unfrozen=1, num_value_layers_unfrozen=1).eval()
    assert torch.equal(restored(input_ids, attention_mask).values, policy(input_ids, attention_mask).values)
