"""Faster kernels for the same math (rlkit_accelerate.kernels), and ILQL decoding that runs only
what Q-guided sampling reads."""

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from rlkit_accelerate.kernels import TanhGELU, fuse_activations
from rlkit_accelerate.models.ilql_heads import CausalLMWithILQLHeads


def tiny_gpt2(seed: int = 0) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=23, bos_token_id=21, eos_token_id=21,
                                      pad_token_id=22, resid_pdrop=0, embd_pdrop=0, attn_pdrop=0))


def test_fused_gelu_is_gpt2s_gelu_new_to_float_rounding():
    model, fused = tiny_gpt2(), tiny_gpt2()
    assert fuse_activations(fused) == 2  # one per block
    assert all(isinstance(block.mlp.act, TanhGELU) for block in fused.transformer.h)
    assert fused.config.activation_function == "gelu_new"  # the exported config is unchanged
    ids = torch.randint(0, 21, (3, 7))
    expected, got = model(ids).logits, fused(ids).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    x = torch.linspace(-12, 12, 10001)
    torch.testing.assert_close(TanhGELU()(x), model.transformer.h[0].mlp.act(x), rtol=0, atol=1e-6)
    assert fuse_activations(fused) == 0  # nothing left to replace


def test_fused_gelu_gradients_match():
    model, fused = tiny_gpt2(), tiny_gpt2()
    fuse_activations(fused)
    ids = torch.randint(0, 21, (2, 5))
    for m in (model, fused):
        m(ids).logits.logsumexp(-1).sum().backward()
    for (name, p), q in zip(model.named_parameters(), fused.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_ilql_decoding_reads_the_heads_forward_at_the_last_position():
    model = CausalLMWithILQLHeads(tiny_gpt2())
    ids, mask = torch.randint(0, 21, (3, 6)), torch.ones(3, 6, dtype=torch.long)
    with torch.no_grad():
        full = model(ids, mask)
        step = model._decode_forward(ids, mask, None, None)
    assert step.qs == () and step.logits.shape == (3, 1, 23) and step.vs.shape == (3, 1, 1)
    torch.testing.assert_close(step.logits, full.logits[:, -1:])
    torch.testing.assert_close(step.vs, full.vs[:, -1:])
    for got, expected in zip(step.target_qs, full.target_qs):
        torch.testing.assert_close(got, expected[:, -1:])
