"""The engine conformance kit (rlkit_core.testing.engine) for DPO, the reward model and
logged_pg on the accelerate engine: hooks and metrics, checkpoints, exact resume, and an
export that plain transformers loads (a causal LM that generates what the trainer generates;
the reward model as a sequence classifier that scores what the trainer scores). Also: where
DPO's reference comes from, and logged_pg's importance weights on rows logged by the policy."""

import math
import sys
from pathlib import Path

import pytest
import torch

from rlkit_core.testing.engine import check_engine_protocol, check_exact_resume, check_export_generates, check_lifecycle

sys.path.insert(0, str(Path(__file__).parents[1] / "accelerate" / "trainers"))
import prefs_setup  # noqa: E402

pytestmark = pytest.mark.slow  # trains real runs (rlkit_core.testing.lanes)
METHODS = ["dpo", "reward_model", "logged_pg"]


def reset():
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()


def run(method, folder, overrides=None, plugins=(), **train_kwargs):
    try:
        return prefs_setup.run(method, folder, config_overrides=overrides, plugins=list(plugins), **train_kwargs)
    finally:
        reset()


def train_records(folder):
    from rlkit_core.testing.engine import read_records

    return [r for r in read_records(folder) if r["kind"] == "train"]


@pytest.mark.parametrize("method", METHODS)
def test_lifecycle_metrics_and_checkpoints(method, tmp_path):
    check_lifecycle(run, method, tmp_path, loss_key="loss")


@pytest.mark.parametrize("method", METHODS)
def test_exact_resume(method, tmp_path):
    check_exact_resume(run, method, tmp_path, loss_key="loss")


@pytest.mark.parametrize("method", ["dpo", "logged_pg"])
def test_export_generates_what_the_trainer_generates(method, tmp_path):
    trainer = run(method, tmp_path, overrides=dict(train=dict(total_steps=2)))
    check_engine_protocol(trainer.engine)
    check_export_generates(trainer, tmp_path / "export", ["a", "bcd"])


def test_reward_model_exports_a_sequence_classifier_that_scores_as_the_trainer(tmp_path):
    from transformers import AutoModelForSequenceClassification

    trainer = run("reward_model", tmp_path, overrides=dict(train=dict(total_steps=2)))
    trainer.save_pretrained(tmp_path / "rm")
    assert not (tmp_path / "rm" / "value_head.safetensors").exists()
    model, info = AutoModelForSequenceClassification.from_pretrained(tmp_path / "rm", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert model.config.num_labels == 1 and model.score.bias is None
    store = trainer.store
    items = store.items[:4]
    batch = store.collate(items)
    ours = trainer.rewards(trainer.engine.forward("response", batch), batch)  # (8,) each pair's chosen, then rejected
    rows = [it["prompt"] + c for it in items for c in (it["chosen"], it["rejected"])]
    width = max(map(len, rows))
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])  # right-padded with the pad id 0
    with torch.no_grad():
        theirs = model.eval()(input_ids=ids, attention_mask=(ids != 0).long()).logits.squeeze(-1)
    assert torch.allclose(ours, theirs, atol=1e-5), (ours, theirs)


def test_reward_model_held_out_accuracy_is_reported_and_rises_above_chance(tmp_path):
    run("reward_model", tmp_path, overrides=dict(train=dict(total_steps=12, eval_interval=12)))
    from rlkit_core.testing.engine import read_records

    evals = [r for r in read_records(tmp_path) if r["kind"] == "eval"]
    assert [e["metrics/pairs"] for e in evals] == [8.0, 8.0]  # a quarter of 32 pairs, never trained on
    assert evals[-1]["metrics/accuracy"] > 0.5 and evals[-1]["metrics/loss"] < evals[0]["metrics/loss"], evals


@pytest.mark.parametrize("reference", ["precompute", "hydra", "lora"])
def test_dpo_reference_is_the_initial_policy_without_a_second_model(reference, tmp_path):
    model = {"precompute": dict(num_layers_unfrozen=-1), "hydra": dict(num_layers_unfrozen=1),
             "lora": dict(num_layers_unfrozen=-1, peft_config=dict(peft_type="LORA", r=4, lora_alpha=8, lora_dropout=0.0))}
    trainer = run("dpo", tmp_path, overrides=dict(model=model[reference], train=dict(total_steps=2)))
    first = train_records(tmp_path)[0]
    # pi = pi_ref at step 0: every implicit reward is 0 and the sigmoid loss is log 2
    assert first["rewards/margins"] == 0.0 and first["loss"] == pytest.approx(math.log(2), abs=1e-6)
    unwrapped = trainer.engine.unwrapped_model
    if reference == "precompute":
        assert not hasattr(unwrapped, "reference")  # the plain LM; log-probs computed before step 1
        assert "ref_chosen_logps" in trainer.store.items[0]
    elif reference == "hydra":
        assert type(unwrapped.reference).__name__ == "Branch" and len(unwrapped.reference.blocks) == 1
    else:
        assert unwrapped.uses_adapters and unwrapped.reference is None  # the adapters switched off


def test_logged_pg_importance_weights_are_exactly_one_for_rows_logged_by_the_policy(tmp_path):
    from rlkit_accelerate.engine import AccelerateEngine
    from rlkit_methods.logged.trainer import LoggedPGTrainer

    samples, rewards = prefs_setup.logged_rows(16)
    config = prefs_setup.config("logged_pg", tmp_path / "log", train=dict(total_steps=1, batch_size=16))
    logger = LoggedPGTrainer(config, engine=AccelerateEngine)  # the same seed builds the same initial model
    try:
        logger.make_experience(samples, rewards, config.train.seq_length)
        batch = logger.store.collate(logger.store.items)
        logprobs = logger.engine.forward("response", batch)["logprobs"]
    finally:
        logger.run_dir.release()
        reset()
    logged = [{"prompt": p, "completion": c, "behaviour_logprobs": lp[: int(n)].tolist()}
              for (p, c), lp, n in zip(samples, logprobs, batch["lengths"])]
    run("logged_pg", tmp_path, overrides=dict(train=dict(total_steps=1, batch_size=16)), samples=logged, rewards=rewards)
    (first,) = train_records(tmp_path)
    assert first["policy/importance_weight_mean"] == 1.0 and first["policy/importance_weight_max"] == 1.0, first
    assert first["policy/truncated_fraction"] == 0.0


@pytest.mark.parametrize("method", ["dpo", "logged_pg"])
def test_rlkit_run_reads_pairs_and_logged_rows_from_jsonl(method, tmp_path):
    """What `rlkit run` does with data.samples from the preference_pairs / logged_completions sources."""
    import json

    from rlkit_core.run import train_from_config

    if method == "dpo":
        rows, source = prefs_setup.walk_pairs(16), "preference_pairs"
    else:
        samples, rewards = prefs_setup.logged_rows(16)
        rows, source = [{"prompt": p, "completion": c, "reward": r} for (p, c), r in zip(samples, rewards)], "logged_completions"
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = prefs_setup.config(method, tmp_path, train=dict(total_steps=2),
                                data=dict(samples=dict(pipeline=source, kwargs=dict(path=str(path))),
                                          eval_prompts=dict(pipeline="randomwalks_prompts")),
                                metric=dict(name="randomwalks_metric"))
    try:
        trainer = train_from_config(config)
    finally:
        reset()
    assert len(trainer.store) == len(rows) and trainer.iter_count == 2
    assert len(train_records(tmp_path)) == 2


def test_a_trained_reward_model_scores_ppo_rollouts(tmp_path):
    """reward: reward_model scores texts as the reward-model trainer scored them, and PPO trains with it."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "accelerate" / "trainers"))
    import walks_setup

    from rlkit_methods.rewards.reward_model import reward_model_reward

    rm = run("reward_model", tmp_path / "rm", overrides=dict(train=dict(total_steps=3)))
    rm.save_pretrained(tmp_path / "rm_model")
    items = rm.store.items[:4]
    batch = rm.store.collate(items)
    ours = rm.rewards(rm.engine.forward("response", batch), batch)  # (8,) chosen, rejected, ...
    texts = [rm.tokenizer.decode(it["prompt"] + c) for it in items for c in (it["chosen"], it["rejected"])]
    reward_fn = reward_model_reward(str(tmp_path / "rm_model"), batch_size=3)
    assert torch.allclose(torch.tensor(reward_fn(texts)), ours, atol=1e-5)
    try:
        ppo = walks_setup.run("ppo", tmp_path / "ppo", config_overrides=dict(train=dict(total_steps=1)), reward_fn=reward_fn)
    finally:
        reset()
    assert ppo.iter_count == 1
