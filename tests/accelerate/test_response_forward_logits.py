"""The plain LM's response forward runs the LM head on the response positions only (HF's
``logits_to_keep``; the prompt's logits are never read) and gives the log-probs the full
head gives."""

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from rlkit_accelerate.forwards import plain_response_forward
from rlkit_methods.engine_kit import logprobs_of_labels
from rlkit_methods.preferences.store import response_batch


def test_plain_response_forward_keeps_the_response_logits_only():
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_embd=16, n_layer=2, n_head=2, n_positions=32)).eval()
    batch = response_batch([[1, 2, 3, 4], [5]], [[6, 7], [8, 9, 10]], pad_id=0)  # Q = 4, R = 3
    widths = []
    handle = model.lm_head.register_forward_hook(lambda module, args, out: widths.append(out.shape[1]))
    try:
        out = plain_response_forward(model, batch)["logprobs"]
    finally:
        handle.remove()
    assert widths == [3 + 1]  # R + 1 positions, not Q + R
    ids = torch.cat([batch["query_tensors"], batch["response_tensors"]], dim=1)
    full = model(input_ids=ids, attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]).logits
    assert torch.allclose(out, logprobs_of_labels(full[:, -4:-1], batch["response_tensors"]), atol=1e-6)
