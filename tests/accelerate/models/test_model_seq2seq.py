"""Seq2seq (T5) models: the decoder in pieces reproduces the model, the hydra reference equals
the policy at step 0, freezing is exact (k = 0 freezes every decoder block), ILQL heads and
Q-guided decoding on the decoder, and save -> load -> identical greedy generation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import transformers
from transformers import T5Config

from rlkit_accelerate.models.seq2seq import Seq2SeqLMWithValueHead, find_seq2seq_layout
from rlkit_accelerate.models.seq2seq_ilql import Seq2SeqLMWithILQLHeads, last_prompt_tokens
from rlkit_core.errors import ConfigError

VOCAB = 64


def t5(num_layers: int = 3, tie: bool = True, seed: int = 0) -> transformers.PreTrainedModel:
    torch.manual_seed(seed)
    config = T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=num_layers, num_heads=4,
                      decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, tie_word_embeddings=tie)
    return transformers.AutoModelForSeq2SeqLM.from_config(config)


def batch():
    """Left-padded prompts [3, 7] and right-padded responses [3, 5] of random tokens."""
    g = torch.Generator().manual_seed(1)
    query = torch.randint(3, VOCAB, (3, 7), generator=g)
    q_mask = torch.ones_like(query)
    for row, pads in enumerate([0, 2, 4]):
        q_mask[row, :pads], query[row, :pads] = 0, 0
    response = torch.randint(3, VOCAB, (3, 5), generator=g)
    r_mask = torch.ones_like(response)
    for row, pads in enumerate([0, 3, 1]):
        if pads:
            r_mask[row, -pads:], response[row, -pads:] = 0, 0
    return query, q_mask, response, r_mask


def plain_logits(model, query, q_mask, response, r_mask):
    start = torch.zeros_like(response[:, :1])
    decoder_ids = torch.cat([start, response[:, :-1]], 1)
    decoder_mask = torch.cat([torch.ones_like(start), r_mask[:, :-1]], 1)
    with torch.no_grad():
        return model(input_ids=query, attention_mask=q_mask, decoder_input_ids=decoder_ids,
                     decoder_attention_mask=decoder_mask).logits


@pytest.mark.parametrize("tie", [True, False])
def test_layout_finds_decoder_pieces_and_t5_output_scale(tie):
    layout = find_seq2seq_layout(t5(tie=tie))
    assert layout.num_blocks == 3 and layout.blocks_name == "decoder.block"
    assert layout.post_names == ["final_layer_norm", "dropout"] + (["<output scale>"] if tie else [])


@pytest.mark.parametrize("tie", [True, False])
@pytest.mark.parametrize("unfrozen", [-1, 0, 1, 2, 3])
def test_reference_equals_policy_at_step_zero(unfrozen, tie):
    query, q_mask, response, r_mask = batch()
    base = t5(tie=tie)
    policy = Seq2SeqLMWithValueHead(base, num_layers_unfrozen=unfrozen).eval()
    out, reference = policy.score_rollout(query, q_mask, response, r_mask)
    assert (reference - out.logits).abs().max().item() == 0
    assert torch.equal(policy.forward_reference(query, q_mask, response, r_mask), reference)
    assert out.logits.shape == (3, 5, VOCAB) and out.values.shape == (3, 5)
    # the pieces are the HF model (the same kernels up to float rounding of the bias path)
    assert torch.allclose(out.logits, plain_logits(base, query, q_mask, response, r_mask), atol=1e-5)
    with torch.no_grad():
        assert torch.equal(policy(query, q_mask, response, r_mask).logits, out.logits)


def _trainable_prefixes(policy):
    names = {n for n, p in policy.base_model.named_parameters() if p.requires_grad}
    return sorted({".".join(n.split(".")[:3]) if n.startswith("decoder.block") else ".".join(n.split(".")[:2]) for n in names})


@pytest.mark.parametrize(
    "unfrozen, expected",
    [
        (0, ["decoder.final_layer_norm"]),  # every decoder block frozen (trlX left them trainable)
        (1, ["decoder.block.2", "decoder.final_layer_norm"]),
        (3, ["decoder.block.0", "decoder.block.1", "decoder.block.2", "decoder.final_layer_norm"]),
    ],
)
def test_freezing_keeps_encoder_embeddings_and_lower_decoder_blocks_fixed(unfrozen, expected):
    policy = Seq2SeqLMWithValueHead(t5(), num_layers_unfrozen=unfrozen)
    assert _trainable_prefixes(policy) == expected
    before = {n: p.clone() for n, p in policy.base_model.named_parameters()}
    query, q_mask, response, r_mask = batch()
    opt = torch.optim.SGD([p for p in policy.parameters() if p.requires_grad], lr=0.1)
    out = policy(query, q_mask, response, r_mask)
    (F.cross_entropy(out.logits.flatten(0, 1), response.flatten()) + out.values.pow(2).mean()).backward()
    opt.step()
    changed = sorted({n for n, p in policy.base_model.named_parameters() if not torch.equal(p, before[n])})
    assert changed and all(n.startswith(tuple(expected)) for n in changed), changed
    assert all(not p.requires_grad for p in policy.reference.parameters())


def untied_t5() -> transformers.PreTrainedModel:
    """A T5 whose LM head has its own weight (transformers 5 ties T5's head to the embeddings
    whatever ``tie_word_embeddings`` says; checkpoints such as T5 v1.1 were trained untied)."""
    model = t5(tie=False)
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    return model


def test_tied_head_stays_frozen_untied_head_trains_and_minus_one_trains_everything():
    tied = t5(tie=False)
    if tied.lm_head.weight is tied.shared.weight:  # tied: the head is the frozen embedding
        assert _trainable_prefixes(Seq2SeqLMWithValueHead(tied, num_layers_unfrozen=0)) == ["decoder.final_layer_norm"]
    policy = Seq2SeqLMWithValueHead(untied_t5(), num_layers_unfrozen=0).eval()
    assert _trainable_prefixes(policy) == ["decoder.final_layer_norm", "lm_head.weight"]
    query, q_mask, response, r_mask = batch()
    out, reference = policy.score_rollout(query, q_mask, response, r_mask)
    assert (reference - out.logits).abs().max().item() == 0  # the reference has its own copy of the head
    policy = Seq2SeqLMWithValueHead(t5(), num_layers_unfrozen=-1)
    assert all(p.requires_grad for p in policy.base_model.parameters())


def test_bad_settings_are_config_errors():
    with pytest.raises(ConfigError, match="model.num_layers_unfrozen: 4 is out of range"):
        Seq2SeqLMWithValueHead(t5(), num_layers_unfrozen=4)
    with pytest.raises(ConfigError, match="method.num_value_layers_unfrozen: .*seq2seq; use 0"):
        Seq2SeqLMWithValueHead(t5(), num_value_layers_unfrozen=1)
    gpt2 = transformers.AutoModelForCausalLM.from_config(transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=VOCAB))
    with pytest.raises(ConfigError, match="model.model_arch_type: seq2seq needs an encoder-decoder model .*causal"):
        Seq2SeqLMWithValueHead(gpt2)


GREEDY = dict(do_sample=False, max_new_tokens=6, eos_token_id=1, pad_token_id=0)


@pytest.mark.parametrize("cls", [Seq2SeqLMWithValueHead, Seq2SeqLMWithILQLHeads])
def test_save_load_gives_identical_greedy_generation(cls, tmp_path):
    query, q_mask, _, _ = batch()
    model = cls(t5(), num_layers_unfrozen=1)
    with torch.no_grad():  # move the weights off their initialisation
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.eval()
    model.save_pretrained(tmp_path)
    plain = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    expected = model.base_model.generate(input_ids=query, attention_mask=q_mask, **GREEDY)
    assert torch.equal(plain.generate(input_ids=query, attention_mask=q_mask, **GREEDY), expected)
    loaded = cls.from_pretrained(tmp_path, num_layers_unfrozen=1).eval()
    heads = "v_head" if cls is Seq2SeqLMWithValueHead else "ilql_heads"
    for (n, a), b in zip(getattr(model, heads).state_dict().items(), getattr(loaded, heads).state_dict().values()):
        assert torch.equal(a, b), n
    if cls is Seq2SeqLMWithValueHead:
        assert torch.equal(loaded.generate(query, q_mask, **GREEDY), model.generate(query, q_mask, **GREEDY))
    else:
        torch.manual_seed(0)
        first = loaded.generate(query, q_mask, beta=1.0, top_k=1, max_new_tokens=6)
        torch.manual_seed(0)
        assert torch.equal(first, model.generate(query, q_mask, beta=1.0, top_k=1, max_new_tokens=6))


def test_policy_generate_returns_prompt_then_new_tokens():
    query, q_mask, _, _ = batch()
    policy = Seq2SeqLMWithValueHead(t5()).eval()
    decoder = policy.base_model.generate(input_ids=query, attention_mask=q_mask, **GREEDY)
    out = policy.generate(query, q_mask, **GREEDY)
    assert torch.equal(out[:, :7], query) and torch.equal(out[:, 7:], decoder[:, 1:])


def test_ilql_beta_zero_top1_equals_greedy_generate():
    query, q_mask, _, _ = batch()
    model = Seq2SeqLMWithILQLHeads(t5()).eval()
    plain = model.base_model.generate(input_ids=query, attention_mask=q_mask, do_sample=False, max_new_tokens=8, pad_token_id=0)
    eos = int(plain[1, 3])  # row 1 stops at its third new token
    expected = model.base_model.generate(input_ids=query, attention_mask=q_mask, do_sample=False, max_new_tokens=8,
                                         eos_token_id=eos, pad_token_id=0)
    got = model.generate(query, q_mask, beta=0.0, top_k=1, max_new_tokens=8, eos_token_id=eos, pad_token_id=0)
    assert torch.equal(got[:, 7:], expected[:, 1:])
    assert (got[1, 7 + 3 :] == 0).all()  # padded after its EOS


def test_ilql_q_guidance_and_logit_mask_on_the_decoder():
    query, q_mask, _, _ = batch()
    model = Seq2SeqLMWithILQLHeads(t5()).eval()
    favourite = torch.full((VOCAB,), -5.0)
    favourite[9] = 50.0  # Q says: token 9, whatever the state
    with torch.no_grad():
        for head in model.ilql_heads.target_q_heads:
            head[-1].weight.zero_()
            head[-1].bias.copy_(favourite)
    out = model.generate(query, q_mask, beta=10.0, top_k=1, max_new_tokens=4, eos_token_id=1)
    assert (out[:, 7:] == 9).all()
    mask = torch.zeros(VOCAB, VOCAB, dtype=torch.bool)
    mask[9, 9] = True  # 9 may not follow 9: the guided choice alternates with the next best
    last = last_prompt_tokens(query, q_mask, torch.tensor([1]))
    mask[last, 9] = True  # nor follow the last prompt token: the first new token is not 9
    torch.manual_seed(0)
    out = model.generate(query, q_mask, beta=10.0, top_k=1, max_new_tokens=4, eos_token_id=1, logit_mask=mask)
    new = out[:, 7:]
    assert (new[:, 0] != 9).all() and not ((new[:, 1:] == 9) & (new[:, :-1] == 9)).any()


def test_ilql_heads_read_the_decoder_states_and_freeze_like_ppo():
    query, q_mask, response, r_mask = batch()
    model = Seq2SeqLMWithILQLHeads(t5(), num_layers_unfrozen=0).eval()
    decoder_ids = torch.cat([torch.zeros_like(response[:, :1]), response], 1)
    out = model(query, q_mask, decoder_ids, states_ixs=torch.tensor([[0, 2]] * 3), actions_ixs=torch.tensor([[1]] * 3))
    assert out.logits.shape == (3, 6, VOCAB) and out.vs.shape == (3, 2, 1) and out.qs[0].shape == (3, 1, VOCAB)
    trainable = {n.split(".")[0] + "." + n.split(".")[1] for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == {"base_model.decoder", "ilql_heads.v_head", "ilql_heads.q_heads"}
    assert not any(p.requires_grad for n, p in model.base_model.named_parameters() if "block" in n)


def test_last_prompt_token_skips_padding_and_the_appended_eos():
    ids = torch.tensor([[0, 0, 5, 6, 1], [7, 8, 9, 1, 0]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 0]])
    assert last_prompt_tokens(ids, mask, torch.tensor([1])).tolist() == [6, 9]


@pytest.mark.parametrize("unfrozen", [0, 1, 3])
def test_frozen_trunk_is_computed_once_and_the_top_alone_trains(unfrozen):
    """forward_trunk / forward_top split the policy where a PPO trainer may cache the trunk."""
    query, q_mask, response, r_mask = batch()
    policy = Seq2SeqLMWithValueHead(t5(), num_layers_unfrozen=unfrozen).eval()
    trunk = policy.forward_trunk(query, q_mask, response, r_mask)  # with autograd on
    tensors = [trunk.hidden, *(v for v in trunk.kwargs.values() if isinstance(v, torch.Tensor))]
    assert trunk.index == 3 - unfrozen and not any(t.requires_grad for t in tensors)
    out = policy.forward_top(trunk)
    assert torch.equal(out.logits, policy(query, q_mask, response, r_mask).logits)
    out.values.sum().backward()
    assert policy.v_head[0].weight.grad is not None


def test_ilql_behaviour_top_k_on_the_decoder():
    """behaviour_top_k 1: whatever Q favours, each step is the behaviour policy's greedy token
    (beta 0, top_k 1); without it the guided token wins (trlX's rule)."""
    query, q_mask, _, _ = batch()
    model = Seq2SeqLMWithILQLHeads(t5()).eval()
    greedy = model.generate(query, q_mask, beta=0.0, top_k=1, max_new_tokens=4, eos_token_id=1)
    assert not (greedy[:, 7:] == 9).any()
    favourite = torch.full((VOCAB,), -5.0)
    favourite[9] = 50.0
    with torch.no_grad():
        for head in model.ilql_heads.target_q_heads:
            head[-1].weight.zero_()
            head[-1].bias.copy_(favourite)
    assert (model.generate(query, q_mask, beta=10.0, top_k=1, max_new_tokens=4, eos_token_id=1)[:, 7:] == 9).all()
    kept = model.generate(query, q_mask, beta=10.0, top_k=5, max_new_tokens=4, eos_token_id=1, behaviour_top_k=1)
    assert torch.equal(kept, greedy)
