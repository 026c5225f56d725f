"""Half-precision training as Megatron does it (rlkit_nemo.precision): trlX's six NeMo YAMLs,
shrunk, train in bf16 O2 through the engine (Float16Module, fp32 main weights); fp16's dynamic
loss scale multiplies the loss; ILQL's target Q heads are Polyak-averaged in fp32."""

from pathlib import Path

import pytest
import torch

from rlkit_core.engine import ModelSpec
from rlkit_nemo.megatron_config import load_megatron_cfg

import nemo_walks

pytestmark = [pytest.mark.usefixtures("megatron_cpu"), pytest.mark.slow]  # engine steps: training

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "trlx_nemo_configs"
TRLX_YAMLS = ("megatron_1.3b.yaml", "megatron_2b.yaml", "megatron_20b.yaml", "megatron_65b.yaml",
              "sft_megatron_20b.yaml", "megatron_llama_cfg.yaml")
ROWS, LENGTH = 4, 12


def shrunk(name: str, **model) -> dict:
    """The YAML as trlX wrote it (precision, O2, norms, activations, rope...) at a CPU's size:
    one process, 2 blocks of 32, micro-batches of 2 in a global batch of 4."""
    raw = load_megatron_cfg(str(FIXTURES / name))
    raw["trainer"].update(devices=1, num_nodes=1)
    raw["model"].update(num_layers=2, hidden_size=32, ffn_hidden_size=48, num_attention_heads=4, encoder_seq_length=16,
                        max_position_embeddings=16, tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
                        micro_batch_size=2, global_batch_size=ROWS, activations_checkpoint_granularity=None,
                        activations_checkpoint_method=None, padded_vocab_size=None, **model)
    return raw


def engine_for(raw: dict, tmp_path, heads: str = "lm", lr: float = 1e-2, yaml_lr: bool = True):
    """The engine on the YAML's own architecture (no pretrained model, as trlX builds it).
    ``yaml_lr``: the YAML's rate set to ``lr``, constant (SFT takes the YAML's optimizer, and
    trlX's schedules start at 0 or hold at min_lr: three steps would not show training)."""
    from rlkit_nemo.engine import MegatronEngine

    if yaml_lr:
        raw = dict(raw, model=dict(raw["model"], optim=dict(raw["model"]["optim"], lr=lr, sched=None)))
    config = nemo_walks.config("sft", tmp_path, optimizer=dict(kwargs=dict(lr=lr)))
    config.model.model_path = ""
    engine = MegatronEngine(config, megatron_cfg=raw)
    engine.build(ModelSpec(heads=heads, options={"two_qs": True, "alpha": 0.001}))
    return engine


def batch(vocab: int):
    ids = torch.randint(2, vocab, (ROWS, LENGTH), generator=torch.Generator().manual_seed(0))
    return [{"input_ids": ids[i], "attention_mask": torch.ones(LENGTH, dtype=torch.long), "labels": ids[i]}
            for i in range(ROWS)]


def collate(items):
    return {k: torch.stack([item[k] for item in items]) for k in items[0]}


def nll(outputs, _batch):
    loss = -(outputs["logprobs"].sum() / outputs["mask"].sum())
    return loss, {"loss": loss.detach()}


@pytest.mark.parametrize("name", TRLX_YAMLS)
def test_each_trlx_yaml_trains_three_steps_in_bf16_o2(name, tmp_path):
    from megatron.core.optimizer import Float16OptimizerWithFloat16Params
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer
    from megatron.core.transformer.module import Float16Module

    engine = engine_for(shrunk(name, megatron_amp_O2=True), tmp_path)  # the 65B and SFT YAMLs say O2 false
    assert engine.model_cfg["num_layers"] == 2 and engine.model_cfg["hidden_size"] == 32  # the YAML's architecture
    assert isinstance(engine.half, Float16Module)
    dtypes = {p.dtype for p in engine.module.parameters()}
    assert dtypes == {torch.bfloat16}, dtypes  # norms and embeddings too, as under Megatron's own training
    inner = getattr(engine.optimizer, "chained_optimizers", [engine.optimizer])
    # distributed_fused_adam: Megatron's distributed optimizer (one data-parallel rank here)
    assert all(isinstance(opt, (Float16OptimizerWithFloat16Params, DistributedOptimizer)) for opt in inner)
    main = [p for group in engine.optimizer.param_groups for p in group["params"]]
    assert main and all(p.dtype == torch.float32 for p in main)
    items = batch(engine.vocab_size)
    losses = [engine.step("tokens", items, collate, nll)["loss"] for _ in range(3)]
    assert all(torch.isfinite(torch.tensor(losses))), losses
    assert losses[0] > losses[1] > losses[2], losses


def test_fp16_scales_the_loss_and_its_grad_norm_matches_bf16(tmp_path):
    norms, steps = {}, {}
    for precision in ("bf16", 16):
        raw = shrunk("megatron_1.3b.yaml", megatron_amp_O2=True, native_amp_init_scale=2.0**12)
        raw["trainer"]["precision"] = precision
        torch.manual_seed(0)
        engine = engine_for(raw, tmp_path / str(precision), lr=1e-3)
        assert {p.dtype for p in engine.module.parameters()} == {torch.bfloat16 if precision == "bf16" else torch.float16}
        out = engine.step("tokens", batch(engine.vocab_size), collate, nll)
        norms[precision] = out["policy/grad_norm"]
        steps[precision] = float(engine.optimizer.get_loss_scale())
    assert steps == {"bf16": 1.0, 16: 2.0**12}
    # before the fix the gradients were divided by the scale and never multiplied: norm / 4096
    assert norms["bf16"] / 10 < norms[16] < norms["bf16"] * 10, norms


def test_fp16_overflow_skips_the_step_and_lowers_the_scale(tmp_path):
    raw = shrunk("megatron_1.3b.yaml", megatron_amp_O2=True, native_amp_init_scale=2.0**40, hysteresis=1)
    raw["trainer"]["precision"] = 16
    engine = engine_for(raw, tmp_path)
    before = [p.detach().clone() for p in engine.module.parameters()]
    out = engine.step("tokens", batch(engine.vocab_size), collate, nll)  # 2^40 x the loss overflows fp16
    assert out["policy/grad_norm"] != out["policy/grad_norm"]  # nan: skipped
    assert all(torch.equal(a, b) for a, b in zip(before, engine.module.parameters()))
    assert float(engine.optimizer.get_loss_scale()) == 2.0**39


def test_ilql_target_heads_are_polyak_averaged_in_fp32(tmp_path):
    engine = engine_for(shrunk("megatron_1.3b.yaml", megatron_amp_O2=True), tmp_path, heads="ilql")
    heads = engine.module.heads
    assert {p.dtype for p in heads.q_heads.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in heads.target_q_heads.parameters()} == {torch.float32}
    with torch.no_grad():  # Q moved away from the targets, as after training
        for p in heads.q_heads.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1)).to(p.dtype) * 0.05)
    q = [p.float() for p in heads.q_heads.parameters()]
    reference = [p.detach().clone() for p in heads.target_q_heads.parameters()]
    start = [r.clone() for r in reference]
    for _ in range(100):
        engine.sync_target(0.001)
        reference = [0.001 * qp + 0.999 * r for qp, r in zip(q, reference)]
    for got, want, s in zip(heads.target_q_heads.parameters(), reference, start):
        moved, want_moved = (got - s).norm(), (want - s).norm()
        if want_moved > 0:
            assert abs(moved / want_moved - 1) < 0.01, (float(moved), float(want_moved))
    # bf16 targets (the old behaviour) would have moved far less than fp32's
    bf16 = [s.bfloat16() for s in start]
    for _ in range(100):
        bf16 = [0.001 * qp.bfloat16() + 0.999 * t for qp, t in zip(q, bf16)]
    ratio = sum(float((b.float() - s).norm()) for b, s in zip(bf16, start)) / sum(
        float((w - s).norm()) for w, s in zip(reference, start))
    assert ratio < 0.9, ratio
