"""ILQL heads: target sync, and Q-guided generation (greedy parity, logit_mask, min over two Qs)."""

from __future__ import annotations

import pytest
import torch
import transformers
from tiny_models import CONFIGS, TOKENS, VOCAB, build, left_padded

from rlkit_accelerate.models import CausalLMWithILQLHeads, ILQLHeads, position_ids_from_mask


def set_constant_head(head: torch.nn.Sequential, bias: torch.Tensor) -> None:
    """Make an MLP head output ``bias`` whatever its input."""
    with torch.no_grad():
        head[-1].weight.zero_()
        head[-1].bias.copy_(bias)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_beta_zero_top1_equals_greedy_generate(arch):
    input_ids, attention_mask = left_padded()
    model = CausalLMWithILQLHeads(build(arch)).eval()
    plain = model.base_model.generate(
        input_ids=input_ids, attention_mask=attention_mask, do_sample=False, max_new_tokens=8, pad_token_id=2
    )
    eos = int(plain[1, input_ids.shape[1] + 2])  # row 1 stops early at its third new token
    expected = model.base_model.generate(
        input_ids=input_ids, attention_mask=attention_mask, do_sample=False, max_new_tokens=8,
        eos_token_id=eos, pad_token_id=2,
    )
    got = model.generate(input_ids, attention_mask, beta=0.0, top_k=1, max_new_tokens=8, eos_token_id=eos, pad_token_id=2)
    assert torch.equal(got, expected)
    assert (got[1, input_ids.shape[1] + 3 :] == 2).all()  # padded after its EOS


def test_logit_mask_forbids_transitions():
    torch.manual_seed(3)
    model = CausalLMWithILQLHeads(build("gpt2", num_layers=2)).eval()
    logit_mask = torch.rand(VOCAB, VOCAB) < 0.7  # True: token j may not follow token i
    logit_mask[:, 5] = False  # every token has an allowed successor
    input_ids, attention_mask = left_padded()
    samples = model.generate(input_ids, attention_mask, beta=1.0, top_k=VOCAB, max_new_tokens=12, eos_token_id=-1)
    assert samples.shape == (3, 9 + 12)
    previous, following = samples[:, 8:-1], samples[:, 9:]
    assert logit_mask[previous, following].any()  # the same sampling without the mask breaks it
    samples = model.generate(
        input_ids, attention_mask, beta=1.0, top_k=VOCAB, max_new_tokens=12, logit_mask=logit_mask, eos_token_id=-1
    )
    previous, following = samples[:, 8:-1], samples[:, 9:]
    assert not logit_mask[previous, following].any()


@pytest.mark.parametrize("two_qs,expected_token", [(True, 9), (False, 5)])
def test_generation_follows_the_minimum_target_q(two_qs, expected_token):
    model = CausalLMWithILQLHeads(build("llama", num_layers=2), two_qs=two_qs).eval()
    first, second = torch.zeros(VOCAB), torch.zeros(VOCAB)
    first[5], first[9] = 50.0, 30.0  # the first head prefers 5 ...
    second[5], second[9] = -50.0, 30.0  # ... the second disagrees: min(Q1, Q2) prefers 9
    for head, bias in zip(model.ilql_heads.target_q_heads, [first, second]):
        set_constant_head(head, bias)
    input_ids, attention_mask = left_padded()
    samples = model.generate(input_ids, attention_mask, beta=100.0, top_k=1, max_new_tokens=4, eos_token_id=-1)
    assert (samples[:, 9:] == expected_token).all()


def test_sync_target_q_heads_is_polyak_with_trlx_convention():
    heads = ILQLHeads(hidden_size=8, vocab_size=11, two_qs=True, alpha=0.25)
    assert all(not p.requires_grad for p in heads.target_q_heads.parameters())
    with torch.no_grad():
        for p in heads.q_heads.parameters():
            p.add_(1.0)
    online = [p.clone() for p in heads.q_heads.parameters()]
    target = [p.clone() for p in heads.target_q_heads.parameters()]
    heads.sync_target_q_heads()
    for new, q, old in zip(heads.target_q_heads.parameters(), online, target):
        torch.testing.assert_close(new, 0.25 * q + 0.75 * old)
    heads.sync_target_q_heads(alpha=1.0)
    assert all(torch.equal(t, q) for t, q in zip(heads.target_q_heads.parameters(), heads.q_heads.parameters()))


def test_forward_heads_read_the_final_hidden_state():
    input_ids, attention_mask = left_padded()
    model = CausalLMWithILQLHeads(build("gpt2"), two_qs=False).eval()
    states_ixs = torch.tensor([[0, 4, 8]] * 3)
    actions_ixs = torch.tensor([[0, 4]] * 3)
    out = model(input_ids, attention_mask, states_ixs=states_ixs, actions_ixs=actions_ixs)
    assert out.logits.shape == (3, 9, VOCAB) and out.vs.shape == (3, 3, 1)
    assert len(out.qs) == len(out.target_qs) == 1 and out.qs[0].shape == (3, 2, VOCAB)
    position_ids = position_ids_from_mask(attention_mask)
    final = model.base_model(input_ids, attention_mask=attention_mask, position_ids=position_ids, output_hidden_states=True)
    final = final.hidden_states[-1]  # after ln_f
    torch.testing.assert_close(out.vs, model.ilql_heads.v_head(final[:, [0, 4, 8]]), rtol=0, atol=0)


def test_ilql_from_a_config_and_back_from_disk(tmp_path):
    """trlX crashed ILQL at the first forward when model_path was a config object."""
    input_ids, attention_mask = left_padded()
    model = CausalLMWithILQLHeads.from_pretrained(CONFIGS["llama"](2), num_layers_unfrozen=1).eval()
    assert not model.base_model.model.layers[0].self_attn.q_proj.weight.requires_grad
    assert model.base_model.model.layers[1].self_attn.q_proj.weight.requires_grad
    out = model(input_ids, attention_mask)
    model.save_pretrained(tmp_path)
    assert (tmp_path / "ilql_heads.safetensors").is_file()
    transformers.AutoModelForCausalLM.from_pretrained(tmp_path)
    restored = CausalLMWithILQLHeads.from_pretrained(tmp_path).eval()
    again = restored(input_ids, attention_mask)
    assert torch.equal(again.logits, out.logits) and torch.equal(again.vs, out.vs)
    assert all(torch.equal(a, b) for a, b in zip(again.target_qs, out.target_qs))


def test_generate_defaults_to_config_eos_and_pad():
    model = CausalLMWithILQLHeads(build("gpt2", num_layers=2)).eval()
    input_ids, attention_mask = left_padded()
    favour_eos = torch.nn.functional.one_hot(torch.tensor(TOKENS["eos_token_id"]), VOCAB) * 50.0
    for head in model.ilql_heads.target_q_heads:
        set_constant_head(head, favour_eos)
    samples = model.generate(input_ids, attention_mask, beta=100.0, top_k=1, max_new_tokens=5)
    assert samples.shape == (3, 10)  # everybody picked EOS (token 1) first and stopped
    assert (samples[:, 9] == TOKENS["eos_token_id"]).all()


def test_min_new_tokens_holds_eos_back():
    """gen_kwargs.min_new_tokens (transformers' meaning): Q-guidance that favours EOS cannot end
    a row before that many new tokens, then may."""
    model = CausalLMWithILQLHeads(build("gpt2", num_layers=2)).eval()
    input_ids, attention_mask = left_padded()
    eos = TOKENS["eos_token_id"]
    favour_eos = torch.nn.functional.one_hot(torch.tensor(eos), VOCAB) * 50.0
    for head in model.ilql_heads.target_q_heads:
        set_constant_head(head, favour_eos)
    samples = model.generate(input_ids, attention_mask, beta=100.0, top_k=1, max_new_tokens=6, min_new_tokens=3)
    new = samples[:, input_ids.shape[1]:]
    assert new.shape == (3, 4) and (new[:, :3] != eos).all() and (new[:, 3] == eos).all()
    from rlkit_methods.ilql.trainer import GENERATE_ARGS

    assert "min_new_tokens" in GENERATE_ARGS  # the trainer passes it through


def test_behaviour_top_k_never_samples_outside_the_behaviour_policy_s_top_k():
    """gen_kwargs.behaviour_top_k: a target Q that favours EOS, which the behaviour policy
    does not rank in its top 2 at the first step: trlX's rule (default) ends every row at
    once at large beta; with behaviour_top_k 2 no row samples it there."""
    model = CausalLMWithILQLHeads(build("gpt2", num_layers=2)).eval()
    input_ids, attention_mask = left_padded()
    eos = TOKENS["eos_token_id"]
    with torch.no_grad():
        first = model(input_ids, attention_mask).logits[:, -1]  # [B, V]
    top2 = first.topk(2, dim=-1).indices
    assert not (top2 == eos).any()  # EOS is outside pi_beta's top 2 for every row
    favour_eos = torch.nn.functional.one_hot(torch.tensor(eos), VOCAB) * 50.0
    for head in model.ilql_heads.target_q_heads:
        set_constant_head(head, favour_eos)
    torch.manual_seed(0)
    trlx = model.generate(input_ids, attention_mask, beta=100.0, top_k=2, max_new_tokens=3)
    assert (trlx[:, input_ids.shape[1]] == eos).all()
    for seed in range(5):
        torch.manual_seed(seed)
        steered = model.generate(input_ids, attention_mask, beta=100.0, top_k=2, max_new_tokens=3, behaviour_top_k=2)
        new = steered[:, input_ids.shape[1]]
        assert (new[:, None] == top2).any(dim=-1).all()  # one of pi_beta's 2 most likely, never EOS
    from rlkit_methods.ilql.trainer import GENERATE_ARGS

    assert "behaviour_top_k" in GENERATE_ARGS  # the trainer passes it through
