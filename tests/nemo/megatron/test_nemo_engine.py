"""The engine conformance kit (rlkit_core.testing.engine) on MegatronEngine in one process
(TP=PP=DP=1), for every method, plus the engine's own refusals. The multi-process layouts
(TP=2, DP=2, PP=2) run the same checks in test_nemo_trainers.py."""

import json
import os

import pytest
import torch

from rlkit_core.errors import ConfigError
from rlkit_core.testing.engine import (
    check_engine_protocol,
    check_exact_resume,
    check_export_generates,
    check_lifecycle,
    check_raising_reward,
    check_stop_sequences,
)

import nemo_walks
from nemo_walks import LOSS_KEY

pytestmark = pytest.mark.usefixtures("megatron_cpu")


def run(method, folder, overrides=None, plugins=(), **train_kwargs):
    return nemo_walks.run(method, folder, config_overrides=overrides, plugins=list(plugins), **train_kwargs)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["ppo", "ilql", "sft"])
def test_lifecycle_metrics_and_checkpoints(method, tmp_path):
    check_lifecycle(run, method, tmp_path, loss_key=LOSS_KEY[method])
    checkpoint = tmp_path / "ckpts" / "checkpoint_4"
    assert sorted(p.name for p in checkpoint.glob("*_rank*.pt")) == ["optimizer_rank0.pt"]
    assert json.loads((checkpoint / "megatron_layout.json").read_text()) == {
        "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1, "data_parallel_size": 1}


@pytest.mark.slow
@pytest.mark.parametrize("method", ["ppo", "ilql", "sft"])
def test_exact_resume(method, tmp_path):
    check_exact_resume(run, method, tmp_path, loss_key=LOSS_KEY[method])


@pytest.mark.slow
@pytest.mark.parametrize("method", ["ppo", "sft"])
def test_export_generates_what_the_trainer_generates(method, tmp_path):
    trainer = run(method, tmp_path, overrides=dict(train=dict(total_steps=2)))
    check_engine_protocol(trainer.engine)
    check_export_generates(trainer, tmp_path / "export", ["a", "bcd"])


@pytest.mark.slow
def test_ilql_export_holds_the_heads_beside_the_hf_model(tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    trainer = run("ilql", tmp_path, overrides=dict(train=dict(total_steps=1)))
    trainer.save_pretrained(tmp_path / "export")
    AutoModelForCausalLM.from_pretrained(tmp_path / "export")
    heads = load_file(tmp_path / "export" / "rlkit_heads.safetensors")
    assert any(k.startswith("heads.target_q_heads.") for k in heads) and any(k.startswith("heads.v_head.") for k in heads)


@pytest.mark.slow
def test_stop_sequences_cut_outputs(tmp_path):
    trainer = run("sft", tmp_path, overrides=dict(train=dict(total_steps=1)), stop_sequences=["##"])
    check_stop_sequences(trainer, "##")


@pytest.mark.slow
def test_a_raising_reward_names_the_function_and_the_step(tmp_path):
    check_raising_reward(run, tmp_path)


@pytest.mark.slow
def test_the_config_optimizer_and_scheduler_drive_megatron(tmp_path):
    # PPO: trlX's NeMoPPOTrainer wrote the config's into the YAML (ILQL and SFT take the YAML's:
    # test_nemo_lr_schedule.py)
    trainer = run("ppo", tmp_path, overrides=dict(
        train=dict(total_steps=3), optimizer=dict(name="adamw", kwargs=dict(lr=0.01, weight_decay=0.1, betas=[0.8, 0.9])),
        scheduler=dict(name="cosine_annealing", kwargs=dict(T_max=2, eta_min=0.002))))
    config = trainer.engine.optimizer.config
    assert (config.lr, config.weight_decay, config.adam_beta1, config.adam_beta2, config.decoupled_weight_decay) == (0.01, 0.1, 0.8, 0.9, True)
    records = [json.loads(line) for line in (tmp_path / "ckpts" / "logs" / "metrics.jsonl").read_text().splitlines()]
    lrs = [r["learning_rate_group_0"] for r in records if r["kind"] == "train"]
    assert lrs == pytest.approx([0.006, 0.002, 0.006])  # cosine from 0.01 to 0.002 over T_max=2 steps, and back
    assert all(g["lr"] == pytest.approx(0.006) for g in trainer.engine.optimizer.param_groups)


@pytest.mark.slow
def test_num_layers_unfrozen_trains_only_the_top_blocks(tmp_path):
    trainer = run("sft", tmp_path, overrides=dict(train=dict(total_steps=1), model=dict(num_layers_unfrozen=1)))
    trained = {n for n, p in trainer.engine.module.named_parameters() if p.requires_grad}
    assert trained and all(not n.startswith(("embedding.", "decoder.layers.0.")) for n in trained)
    assert any(n.startswith("decoder.layers.1.") for n in trained)


def test_a_missing_megatron_cfg_is_one_line_naming_the_examples(tmp_path):
    config = nemo_walks.config("sft", tmp_path)
    config.train.trainer_kwargs = {}
    with pytest.raises(ConfigError) as err:
        nemo_walks.rlkit.train(samples=["ab", "cd"], config=config)
    message = str(err.value)
    assert message.startswith("train.trainer_kwargs.megatron_cfg: missing") and "megatron_tiny_cpu.yaml" in message
    assert "\n" not in message


def test_batch_sizes_that_do_not_fit_the_world_fail_before_a_model_loads(tmp_path, monkeypatch):
    import rlkit_nemo.build

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(rlkit_nemo.build, "model_source", no_model)
    with pytest.raises(ConfigError, match=r"global_batch_size=6 is not a multiple of micro_batch_size x data-parallel size = 4 x 1"):
        nemo_walks.run("sft", tmp_path, layout=dict(global_batch=6, micro_batch=4))
    with pytest.raises(ConfigError, match=r"TP=2 x PP=1 = 2 does not divide the world size 1"):
        nemo_walks.run("sft", tmp_path, layout=dict(tp=2))


@pytest.mark.slow
def test_resuming_with_other_parallel_sizes_is_one_line(tmp_path):
    from rlkit_core.errors import RlkitError
    from rlkit_nemo import state

    trainer = run("sft", tmp_path, overrides=dict(train=dict(total_steps=1, checkpoint_interval=1)))
    layout = tmp_path / "ckpts" / "checkpoint_1" / state.LAYOUT_FILE
    layout.write_text(json.dumps({"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 1, "data_parallel_size": 1}))
    with pytest.raises(RlkitError, match=r"saved with .*tensor_model_parallel_size': 2.*resume with the Megatron YAML's parallel sizes"):
        trainer.load(tmp_path / "ckpts" / "checkpoint_1")


@pytest.mark.slow
@pytest.mark.parametrize("damaged", ["model_tp0_pp0.safetensors", "optimizer_rank0.pt"])
def test_a_cut_checkpoint_file_is_named_on_resume(damaged, tmp_path):
    """The loop's reading of a checkpoint names a cut-short file of the NeMo engine's state in
    one line, as it does the accelerate engine's."""
    from rlkit_core.errors import RlkitError

    trainer = run("sft", tmp_path, overrides=dict(train=dict(total_steps=1, checkpoint_interval=1)))
    checkpoint = tmp_path / "ckpts" / "checkpoint_1"
    path = checkpoint / damaged
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(RlkitError) as error:
        trainer.load(checkpoint)
    message = str(error.value)
    assert message.startswith(f"{path}: truncated") and "\n" not in message, message
    assert message.endswith(f"checkpoint {checkpoint} cannot be loaded, resume from an earlier one")


class Boom:
    def __init__(self, mark):
        self.mark = mark

    def __reduce__(self):
        return (os.system, (f"touch {self.mark}",))


@pytest.mark.slow
def test_an_optimizer_file_holding_code_is_refused_and_nothing_runs(tmp_path):
    from rlkit_core.errors import RlkitError

    trainer = run("sft", tmp_path, overrides=dict(train=dict(total_steps=1, checkpoint_interval=1)))
    checkpoint = tmp_path / "ckpts" / "checkpoint_1"
    mark = tmp_path / "pwned"
    torch.save([{"state": {}, "evil": Boom(mark)}], checkpoint / "optimizer_rank0.pt")
    with pytest.raises(RlkitError) as error:
        trainer.load(checkpoint)
    assert str(error.value).startswith(f"{checkpoint / 'optimizer_rank0.pt'}: refused, it holds objects that need code to load")
    assert not mark.exists()  # nothing ran


@pytest.mark.slow
def test_a_bf16_yaml_without_o2_runs_fp32_weights_under_bf16_autocast(tmp_path):
    import torch

    cfg = nemo_walks.megatron_cfg()
    cfg["trainer"]["precision"] = "bf16"
    config = nemo_walks.config("sft", tmp_path, train=dict(total_steps=2, trainer_kwargs=dict(megatron_cfg=cfg)))
    trainer = nemo_walks.rlkit.train(samples=nemo_walks.TASK.walks[:16], config=config)
    engine = trainer.engine
    assert engine.autocast is torch.bfloat16
    assert {p.dtype for p in engine.module.parameters()} == {torch.float32}
    batch = trainer.store.collate([trainer.store[i] for i in range(4)])
    seen = []
    hook = engine.module.decoder.layers[0].mlp.linear_fc1.register_forward_hook(lambda m, i, o: seen.append(o[0].dtype))
    try:
        engine.forward("tokens", batch)
    finally:
        hook.remove()
    assert seen == [torch.bfloat16]  # the linear layers compute in bf16
    records = [json.loads(line) for line in (tmp_path / "ckpts" / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert all(0 < r["loss"] < 10 for r in records if r["kind"] == "train")


@pytest.mark.slow
def test_a_generation_setting_the_engine_lacks_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"^method.gen_kwargs.repetition_penalty: the NeMo engine's sampling does not take it"):
        run("sft", tmp_path, overrides=dict(train=dict(total_steps=1), method=dict(gen_kwargs=dict(max_new_tokens=4, repetition_penalty=1.2))))


@pytest.mark.slow
def test_ilql_behaviour_top_k_is_refused_in_one_line(tmp_path):
    """gen_kwargs.behaviour_top_k (the accelerate engine's Q-guided decoding takes it) is not
    in the NeMo engine's sampling: refused at the first evaluation, not ignored."""
    gen = dict(max_new_tokens=4, top_k=2, beta=[0, 1], temperature=1.0, behaviour_top_k=2)
    with pytest.raises(ConfigError, match=r"^method.gen_kwargs.behaviour_top_k: the NeMo engine's sampling does not take it"):
        run("ilql", tmp_path, overrides=dict(train=dict(total_steps=1), method=dict(gen_kwargs=gen)))


@pytest.mark.slow
def test_a_short_last_micro_batch_counts_by_its_rows(tmp_path, monkeypatch):
    """Engine.step weights micro-batches by rows: 6 rows in micro-batches of 4 and 2 give the
    stats and gradients of one micro-batch of all 6 (for a loss that is a mean over rows).
    The engine refused the short micro-batch before; an unweighted mean over micro-batches
    would count the 2 rows as much as the 4."""
    import rlkit_nemo.optim

    trainer = run("sft", tmp_path, overrides=dict(train=dict(total_steps=1)))  # micro_batch_size 4
    engine = trainer.engine
    grads = []

    def no_step(optimizer, max_grad_norm):  # keep the weights: both steps see the same ones
        grads.append(torch.cat([p.main_grad.flatten().clone() for p in engine.module.parameters() if p.requires_grad]))
        return False, 0.0

    monkeypatch.setattr(rlkit_nemo.optim, "optimizer_step", no_step)

    def loss(outputs, batch):
        per_row = -(outputs["logprobs"] * outputs["mask"]).sum(1)  # (B,)
        return per_row.mean(), {"row_loss": per_row.mean().item(), "rows": float(per_row.shape[0])}

    items = [trainer.store[i] for i in range(6)]
    split = engine.step("tokens", items, trainer.collate, loss)
    monkeypatch.setattr(engine, "batch_sizes", lambda: (6, 6))
    whole = engine.step("tokens", items, trainer.collate, loss)
    assert whole["rows"] == 6 and split["rows"] == pytest.approx((4 * 4 + 2 * 2) / 6)  # 4 and 2 rows, by rows
    assert split["row_loss"] == pytest.approx(whole["row_loss"], rel=1e-5)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-6)
