"""``train.packing``: every method's training loss and gradients on packed rows (in bins, and for
the ``"tokens"`` kind also end to end under row attention) equal the padded
path's (float32: loss within 1e-5 absolute + 1e-5 relative, every gradient within 1e-4 of its largest entry),
for GPT-2 (learned absolute positions, so position ids must restart on every row) and Llama
(rotary), left- and right-padded batches with rows of very different lengths; and a one-line
refusal where packing cannot apply."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch
from transformers import GPT2Config, LlamaConfig

import grpo_setup
import prefs_setup
import walks_setup
from rlkit_core.errors import ConfigError
from rlkit_methods.data.prompts import PromptPipeline
from rlkit_methods.engine_kit import to_device
from rlkit_accelerate import packing, row_attention
from rlkit_accelerate.packing import bin_width, first_fit, pack_rows, rows_pay
from rlkit_accelerate.trainers import (
    AccelerateDPOTrainer,
    AccelerateGRPOTrainer,
    AccelerateILQLTrainer,
    AcceleratePPOTrainer,
    AccelerateRewardModelTrainer,
    AccelerateRLOOTrainer,
    AccelerateSFTTrainer,
)

TOKENIZER = walks_setup.TOKENIZER
TASK = walks_setup.TASK
# rows from 1 to 40 tokens: a short walk, a long one, everything between
LONG = "abcdefghijklmnopqrstuvwxyzabcdefghijklm"
SAMPLES = ["a", LONG, "bd", "cdefgh"] + TASK.walks[:4]


def model_config(arch: str):
    common = dict(vocab_size=len(TOKENIZER), bos_token_id=1, eos_token_id=1, pad_token_id=0)
    if arch == "gpt2":  # no dropout: the padded and packed passes must see the same network
        return GPT2Config(n_layer=2, n_embd=32, n_head=4, n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                          **common)
    return LlamaConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
                       max_position_embeddings=64, **common)


def make(setup, kind: str, arch: str, side: str, tmp_path, **overrides):
    overrides = {"tokenizer": dict(padding_side=side), **overrides}
    overrides["train"] = dict(seq_length=48, packing=True, **overrides.get("train", {}))
    config = setup.config(kind, tmp_path, **overrides)
    config.model.model_path = model_config(arch)
    return config


def loss_and_grads(trainer, items, packing: bool):
    engine = trainer.engine
    engine.packing = packing
    model = engine.model
    model.zero_grad(set_to_none=True)
    batch = to_device(trainer.collate(items), engine.device)
    loss, _ = trainer.loss(engine._forward(trainer.forward_kind, model, batch, (), train=True), batch)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return loss.detach(), grads


def assert_same_step(trainer, items):
    padded_loss, padded = loss_and_grads(trainer, items, packing=False)
    packed_loss, packed = loss_and_grads(trainer, items, packing=True)
    assert torch.isfinite(padded_loss)
    assert torch.allclose(packed_loss, padded_loss, rtol=1e-5, atol=1e-5), (packed_loss.item() - padded_loss.item(), padded_loss.item())
    assert packed.keys() == padded.keys() and padded
    largest = max(grad.abs().max().item() for grad in padded.values())
    assert largest > 1e-4  # a step that moves the weights
    for name, grad in padded.items():
        scale = max(grad.abs().max().item(), 1e-3 * largest)  # each tensor to its own scale
        assert (packed[name] - grad).abs().max().item() <= 1e-4 * scale, name


def padding_of(batch) -> torch.Tensor:
    mask = batch["attention_mask"] if isinstance(batch, dict) else batch.attention_mask
    return (mask == 0).sum(-1)


ARCHS = ["gpt2", "llama"]
SIDES = ["left", "right"]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("layout", ["bins", "rows"])
def test_sft_packed_equals_padded(arch, side, layout, tmp_path, monkeypatch):
    trainer = AccelerateSFTTrainer(make(walks_setup, "sft", arch, side, tmp_path))
    trainer.make_experience(SAMPLES, 48)
    items = [trainer.store[i] for i in range(len(SAMPLES))]
    assert padding_of(trainer.collate(items)).max() >= 35  # a 1-token row beside a 40-token one
    assert trainer.engine.row_attention  # both models run row attention right (the build's probe)
    trainer.engine.row_attention = layout == "rows"
    monkeypatch.setattr(packing, "rows_pay", lambda *args: True)  # this tiny model's choice: test_rows_end_to_end_...
    calls = []
    monkeypatch.setattr(packing, "running_rows", lambda lm, rows: calls.append(rows) or row_attention.running_rows(lm, rows))
    assert_same_step(trainer, items)
    assert bool(calls) == (layout == "rows")  # the rows layout ran, or with row attention off never


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("side", SIDES)
def test_ilql_packed_equals_padded(arch, side, tmp_path):
    trainer = AccelerateILQLTrainer(make(walks_setup, "ilql", arch, side, tmp_path))
    samples = [["a", LONG], ["b", "c"], ["cd", "efgh"]] + [[w[0], w[1:]] for w in TASK.walks[:5]]
    trainer.make_experience(samples, [1.0, -1.0, 0.5, 0.0, 1.0, 0.2, -0.3, 0.7], 48)
    items = [trainer.store[i] for i in range(len(samples))]
    assert padding_of(trainer.collate(items)).max() >= 30
    assert_same_step(trainer, items)


@pytest.mark.parametrize("kind", ["dpo", "reward_model"])
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("side", SIDES)
def test_preference_methods_packed_equal_padded(kind, arch, side, tmp_path):
    cls = {"dpo": AccelerateDPOTrainer, "reward_model": AccelerateRewardModelTrainer}[kind]
    method = {"eval_fraction": 0.0} if kind == "reward_model" else {}
    trainer = cls(make(prefs_setup, kind, arch, side, tmp_path, method=method))
    pairs = [{"prompt": "a", "chosen": LONG, "rejected": "b"}] + prefs_setup.walk_pairs(5)
    trainer.make_experience(pairs, 48)
    trainer.prepare_learning() if kind == "dpo" else None  # DPO: the reference log-probs into each pair
    items = [trainer.store[i] for i in range(len(pairs))]
    assert_same_step(trainer, items)


def rollouts(trainer, n: int = 16):
    prompts = ["b", "cd", "efgh", "a" * 9] * 4
    trainer.add_prompt_pipeline(PromptPipeline(prompts, 12, trainer.tokenizer))
    trainer.make_experience(n)
    return [trainer.store[i] for i in range(8)]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("unfrozen", [-1, 1])
def test_ppo_packed_equals_padded(arch, side, unfrozen, tmp_path):
    config = make(walks_setup, "ppo", arch, side, tmp_path, model=dict(num_layers_unfrozen=unfrozen))
    trainer = AcceleratePPOTrainer(config, reward_fn=walks_setup.reward_fn)
    items = rollouts(trainer)
    assert (unfrozen >= 0) == all(item.trunk is not None for item in items)  # the kept trunk is packed too
    assert_same_step(trainer, items)


@pytest.mark.parametrize("kind", ["grpo", "rloo"])
@pytest.mark.parametrize("side", SIDES)
def test_grpo_and_rloo_packed_equal_padded(kind, side, tmp_path):
    cls = {"grpo": AccelerateGRPOTrainer, "rloo": AccelerateRLOOTrainer}[kind]
    trainer = cls(make(grpo_setup, kind, "llama", side, tmp_path), reward_fn=walks_setup.reward_fn)
    # an untrained model's walks all score 0 (no advantage, no gradient): give the rows advantages
    items = [dataclasses.replace(item, advantage=torch.full_like(item.advantage, (-1.0) ** i * (1 + i / 4)))
             for i, item in enumerate(rollouts(trainer))]
    assert_same_step(trainer, items)


def test_rows_are_packed_into_bins_of_the_longest_row():
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 0], [0, 1, 0, 0], [1, 1, 1, 1]])
    p = pack_rows(mask)
    # bins of 4, longest rows first: [row 3], [row 1, row 2], [row 0, 2 unused positions]
    assert p.position_ids.tolist() == [[0, 1, 2, 3], [0, 1, 2, 0], [0, 1, 0, 1]]
    assert p.columns(torch.tensor([[3, 2], [0, 2], [1, 1], [0, 3]])).tolist() == [[9, 8], [4, 6], [7, 7], [0, 3]]
    x = torch.arange(16.0).view(4, 4)
    assert torch.equal(p.unpack(p.pack(x)), x * mask)
    at = torch.tensor([[0, 0, 0, 1], [1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 1, 0]]).bool()
    assert p.keep(at).flatten().nonzero().flatten().tolist() == [2, 4, 9]
    assert torch.equal(p.unkeep(p.pack(x)[p.keep(at)], at), x * at)


def test_bins_widen_where_rows_near_the_longest_leave_padding():
    # 100 rows of 2-11 tokens, a small model's attention cost: bins of the longest row (11)
    walks = [2 + i % 10 for i in range(100)]
    assert bin_width(walks, 1 / (6 * 144)) == 11  # bins of 22: estimated 3% cheaper, measured slower
    # three full rows and a short one: bins of 256 cannot pair them; one bin of all 813 can
    reviews = [256, 256, 256, 45]
    assert bin_width(reviews, 1 / (6 * 576)) == 813
    assert bin_width(reviews, None) == 256  # no cost given: the longest row
    p = pack_rows(torch.tensor([[1] * 256] * 3 + [[1] * 45 + [0] * 211]), 1 / (6 * 576))
    assert p.shape == (1, 813) and p.position_ids[0, 768:].tolist() == list(range(45))


def test_rows_end_to_end_where_they_cost_less_than_bins():
    c = 1 / (6 * 576)  # SmolLM2-135M
    reviews = [256, 256, 180, 240, 130, 256, 90, 201]  # 8 reviews cut at 256: bins leave ends unused
    assert len(first_fit(reviews, 256)[1]) == 7 and rows_pay(reviews, 256, 7, c)
    p = pack_rows(torch.tensor([[1] * n + [0] * (256 - n) for n in reviews]), c, rows=True)
    assert p.shape == (1, sum(reviews)) and p.rows.index.shape == (8, 256)
    assert p.position_ids[0, :257].tolist() == list(range(256)) + [0]  # in the batch's order, restarting
    assert pack_rows(torch.tensor([[1] * n + [0] * (256 - n) for n in reviews]), c).rows is None  # no row attention
    # one long row among a hundred short ones: every row padded to 256 inside attention costs
    # more than bins of 256 (100 x 256^2 / 2 query-key pairs against 5 x 256^2)
    tail = [256] + [8] * 100
    assert not rows_pay(tail, 256, 5, c)
    # the randomwalks (100 rows of 2-11, a 144-wide GPT-2): bins of 11 leave little unused and
    # the gathers cost more than they save (measured: bench/packing.py, docs/benchmarks.md)
    walks = [2 + i % 10 for i in range(100)]
    assert not rows_pay(walks, 11, len(first_fit(walks, 11)[1]), 1 / (6 * 144))
    assert pack_rows(torch.tensor([[1] * n + [0] * (256 - n) for n in tail]), c, rows=True).rows is None


def test_row_attention_keeps_rows_apart_and_causal():
    torch.manual_seed(0)
    lengths, H, D = [5, 1, 3], 4, 8
    q, k, v = (torch.randn(1, H, sum(lengths), D, requires_grad=True) for _ in range(3))
    layout = row_attention.RowLayout.of([0, 5, 6], lengths, "cpu")
    lm = SimpleNamespace(config=SimpleNamespace(_attn_implementation="sdpa"))
    with row_attention.running_rows(lm, layout):
        assert lm.config._attn_implementation == row_attention.NAME
        out, _ = row_attention.rows_attention_forward(None, q, k, v, None, scaling=D**-0.5)  # (1, N, H, D)
    starts = [0, 5, 6]
    for s, n in zip(starts, lengths):  # each row as attention over that row alone
        alone = torch.nn.functional.scaled_dot_product_attention(q[:, :, s:s + n], k[:, :, s:s + n], v[:, :, s:s + n],
                                                                 is_causal=True)
        assert torch.allclose(out[0, s:s + n], alone[0].transpose(0, 1), atol=1e-6)
    assert lm.config._attn_implementation == "sdpa"  # restored after the forward
    # no row's output depends on another row's keys: row 1's gradient reaches row 1's positions only
    out[0, 5].sum().backward()
    assert k.grad[0, :, 5].abs().sum() > 0 and k.grad[0, :, :5].abs().sum() == 0 and k.grad[0, :, 6:].abs().sum() == 0
    with pytest.raises(RuntimeError, match="inside running_rows"):  # never silently unmasked
        row_attention.rows_attention_forward(None, q, k, v, None)


def test_a_model_whose_attention_skips_row_attention_trains_in_bins(tmp_path, monkeypatch):
    # a model that would run without any mask under row attention (whole-sequence causal
    # attention): the build's probe sees rows attending to each other and keeps bins
    def whole_sequence(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        out = torch.nn.functional.scaled_dot_product_attention(query, key, value, is_causal=True, scale=scaling,
                                                               enable_gqa=True)
        return out.transpose(1, 2), None

    from transformers import AttentionInterface

    monkeypatch.setitem(AttentionInterface._global_mapping, row_attention.NAME, whole_sequence)
    trainer = AccelerateSFTTrainer(make(walks_setup, "sft", "llama", "right", tmp_path))
    assert trainer.engine.packing and not trainer.engine.row_attention
    trainer.make_experience(SAMPLES, 48)
    assert_same_step(trainer, [trainer.store[i] for i in range(len(SAMPLES))])


def test_seq2seq_is_refused(tmp_path):
    import t5_walks_setup

    config = t5_walks_setup.config("sft", tmp_path, train=dict(packing=True))
    with pytest.raises(ConfigError, match=r"^train\.packing: .*seq2seq.*set train\.packing: false$"):
        AccelerateSFTTrainer(config)


def test_prompt_learning_is_refused(tmp_path):
    peft = dict(peft_type="PROMPT_TUNING", num_virtual_tokens=4, task_type="CAUSAL_LM")
    config = make(walks_setup, "sft", "gpt2", "right", tmp_path, model=dict(peft_config=peft))
    with pytest.raises(ConfigError, match=r"^train\.packing: peft prompt learning"):
        AccelerateSFTTrainer(config)


def test_a_model_that_attends_across_rows_is_refused(tmp_path, monkeypatch):
    import transformers.masking_utils as masking_utils

    # transformers without packed-sequence detection: one causal mask over the whole packed row
    monkeypatch.setattr(masking_utils, "find_packed_sequence_indices", lambda position_ids: None)
    config = make(walks_setup, "sft", "llama", "right", tmp_path)
    with pytest.raises(ConfigError, match=r"^train\.packing: LlamaForCausalLM \(attention sdpa\) lets packed rows attend"):
        AccelerateSFTTrainer(config)


LORA = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}


@pytest.mark.parametrize("method", ["sft", "ppo"])
def test_lora_packed_equals_padded(method, tmp_path):
    config = make(walks_setup, method, "llama", "left", tmp_path, model=dict(peft_config=LORA))
    if method == "sft":
        trainer = AccelerateSFTTrainer(config)
        trainer.make_experience(SAMPLES, 48)
        items = [trainer.store[i] for i in range(len(SAMPLES))]
    else:
        trainer = AcceleratePPOTrainer(config, reward_fn=walks_setup.reward_fn)
        items = rollouts(trainer)
    assert_same_step(trainer, items)
