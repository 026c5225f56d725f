"""Groups of completions of one prompt run the prompt once (shared_prompts.py): sampling draws
the same tokens, and the response logits, the reference's and the gradients equal those of a
pass over every row, for rows of one prompt in any order mixed with rows of other prompts."""

from __future__ import annotations

import pytest
import torch
from tiny_models import VOCAB, build

from rlkit_accelerate.models import CausalLMWithValueHead
import rlkit_accelerate.models.policy as policy_module
from rlkit_accelerate.models.shared_prompts import generate_sharing_prompts, prompt_groups

PAD = 2


def grouped_batch():
    """Prompts [6, 7] with 0, 2 and 4 left pads: prompt a three times, b twice (apart), c once,
    shuffled; right-padded responses [6, 5] of different lengths."""
    g = torch.Generator().manual_seed(3)
    prompts, masks = [], []
    for pads in (0, 2, 4):
        ids = torch.randint(3, VOCAB, (7,), generator=g)
        ids[:pads] = PAD
        mask = torch.ones(7, dtype=torch.long)
        mask[:pads] = 0
        prompts.append(ids)
        masks.append(mask)
    order = [0, 1, 0, 2, 1, 0]  # a, b, a, c, b, a
    query = torch.stack([prompts[i] for i in order])
    q_mask = torch.stack([masks[i] for i in order])
    response = torch.randint(3, VOCAB, (6, 5), generator=g)
    r_mask = torch.ones_like(response)
    for row, length in enumerate([5, 3, 5, 1, 4, 2]):
        r_mask[row, length:] = 0
        response[row, length:] = PAD
    return query, q_mask, response, r_mask


def test_prompt_groups_finds_repeats_in_any_order():
    query, q_mask, _, _ = grouped_batch()
    groups = prompt_groups(query, q_mask)
    assert groups.first.shape == (3,)
    rows = groups.group.tolist()
    assert rows[0] == rows[2] == rows[5] and rows[1] == rows[4] and len(set(rows)) == 3
    for u, row in enumerate(groups.first.tolist()):  # each distinct prompt's row holds it
        assert groups.group[row] == u
    assert prompt_groups(query[:2], q_mask[:2]) is None  # all different: nothing to share
    same_ids_other_padding = q_mask.clone()
    same_ids_other_padding[1] = 1
    assert prompt_groups(query[[0, 1]], same_ids_other_padding[[0, 1]]) is None


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_sampling_draws_the_same_tokens_with_one_prefill_per_prompt(arch, monkeypatch):
    query, q_mask, _, _ = grouped_batch()
    model = build(arch).eval()
    kwargs = dict(max_new_tokens=6, do_sample=True, top_k=0, pad_token_id=0)
    torch.manual_seed(0)
    expected = model.generate(input_ids=query, attention_mask=q_mask, **kwargs)
    rows_fed = []
    hook = model.get_input_embeddings().register_forward_hook(lambda m, a, out: rows_fed.append(out.shape[:2]))
    torch.manual_seed(0)
    out = generate_sharing_prompts(model, query, q_mask, **kwargs)
    hook.remove()
    assert torch.equal(out, expected)
    assert rows_fed[0] == (3, 6)  # the three distinct prompts, all but their last token
    assert rows_fed[1] == (6, 1)  # then every row, one token at a time


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_response_logits_and_gradients_equal_a_pass_over_every_row(arch, monkeypatch):
    query, q_mask, response, r_mask = grouped_batch()
    torch.manual_seed(0)
    policy = CausalLMWithValueHead(build(arch), num_layers_unfrozen=-1, value_head=False).eval()  # GPT-2 drops out
    assert policy.shares_prompts()
    real = r_mask.bool()
    fed = []
    policy.base_model.get_input_embeddings().register_forward_hook(lambda m, a, out: fed.append(tuple(out.shape[:2])))

    def run():
        policy.zero_grad()
        fed.clear()
        logits = policy(query, q_mask, response_ids=response, response_mask=r_mask).logits
        logits[real].logsumexp(-1).sum().backward()
        score, reference = policy.score_rollout(query, q_mask, response, r_mask)
        grads = {n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None}
        return logits.detach(), score.logits, reference, grads, list(fed)

    shared, shared_score, shared_ref, shared_grads, shared_fed = run()
    monkeypatch.setattr(policy_module, "prompt_groups", lambda *a: None)  # every row's prompt runs
    full, full_score, full_ref, full_grads, full_fed = run()
    assert shared_fed[:2] == [(3, 6), (6, 5)]  # distinct prompts but their last token, then that token and the responses but their last
    assert full_fed[0] == (6, 12)
    assert shared.shape == full.shape == (6, 5, VOCAB)
    torch.testing.assert_close(shared[real], full[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(shared_score[real], full_score[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(shared_ref[real], full_ref[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(shared_ref[real], shared_score[real], atol=1e-5, rtol=1e-5)  # step 0: reference = policy
    assert shared_grads.keys() == full_grads.keys() and len(shared_grads) > 0
    for name in full_grads:
        torch.testing.assert_close(shared_grads[name], full_grads[name], atol=1e-5, rtol=1e-4, msg=name)


def test_not_shared_where_the_model_reads_more_than_logits():
    frozen = CausalLMWithValueHead(build("gpt2"), num_layers_unfrozen=2, value_head=False)
    with_values = CausalLMWithValueHead(build("gpt2"), num_layers_unfrozen=-1)
    assert not frozen.shares_prompts() and not with_values.shares_prompts()


def test_the_trunk_kept_from_a_shared_prefill_covers_every_row(monkeypatch):
    """Frozen trunk (num_layers_unfrozen 2): what sampling keeps for score_rollout comes from
    the distinct prompts' prefill copied to their rows, and matches a full trunk pass."""
    query, q_mask, _, _ = grouped_batch()
    policy = CausalLMWithValueHead(build("llama"), num_layers_unfrozen=2, value_head=False).eval()
    monkeypatch.setattr(policy, "caches_trunk", lambda: True)
    torch.manual_seed(0)
    out = policy.generate(input_ids=query, attention_mask=q_mask, max_new_tokens=4, do_sample=True, top_k=0, pad_token_id=0)
    Q = query.shape[1]
    response = out[:, Q:]
    r_mask = torch.ones_like(response)
    joined, mask = torch.cat([query, response], 1), torch.cat([q_mask, r_mask], 1)
    trunk = policy.sampled_trunk(joined, mask)
    assert trunk is not None
    full = policy.forward_trunk(joined, mask)
    real = mask.bool() & (torch.arange(mask.shape[1]) < mask.shape[1] - 1)  # the last token was never fed
    torch.testing.assert_close(trunk.hidden[real], full.hidden[real], atol=1e-5, rtol=1e-5)
