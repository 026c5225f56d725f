"""The three accelerate trainers end to end on a tiny model: learning signal, metrics file,
checkpoint layout, HF export and the lifecycle hooks."""


import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from rlkit_methods.run.checkpoint import is_complete
from rlkit_methods.run.metrics_log import read_metrics
from rlkit_core.testing import RecordingObserver
from walks_setup import TOKENIZER, run

pytestmark = pytest.mark.slow  # trains real runs (rlkit_core.testing.lanes)


@pytest.mark.parametrize("method", ["sft", "ilql", "ppo"])
def test_trainer_runs_logs_and_checkpoints(method, tmp_path):
    observer = RecordingObserver()
    trainer = run(method, tmp_path, plugins=[observer], config_overrides=dict(train=dict(total_steps=4, checkpoint_interval=2, eval_interval=2)))
    assert trainer.iter_count == 4
    records = read_metrics(tmp_path / "ckpts" / "logs")
    train_steps = [r["step"] for r in records if r["kind"] == "train"]
    assert train_steps == [1, 2, 3, 4]
    assert [r["step"] for r in records if r["kind"] == "eval"] == [0, 2, 4]
    loss_key = {"sft": "loss", "ilql": "losses/loss", "ppo": "losses/total_loss"}[method]
    assert all(loss_key in r for r in records if r["kind"] == "train"), records[1]
    for step in (2, 4):
        ckpt = tmp_path / "ckpts" / f"checkpoint_{step}"
        assert is_complete(ckpt)
        assert (ckpt / "config.yml").is_file() and (ckpt / "loop_state_0.pt").is_file()
        assert (ckpt / "hf_model" / "config.json").is_file() and (ckpt / "accelerate").is_dir()
    names = observer.names()
    assert names.count("rlkit_step_end") == 4 and names.count("rlkit_checkpoint_saved") == 2
    assert names.count("rlkit_evaluation_end") == 3 and names[-1] == "rlkit_train_end"
    if method == "ppo":
        rollouts = [r for r in records if r["kind"] == "rollout"]
        assert rollouts and all(k in rollouts[0] for k in ("time/rollout_generate", "time/rollout_score", "time/rollout_forward", "tokens_per_second/generate"))
        # CPU seconds beside wall seconds: sampling does work, so its CPU time is never 0
        assert all(r["cpu/rollout_generate"] > 0 and "cpu/rollout_forward" in r for r in rollouts)
    evals = [r for r in records if r["kind"] == "eval"]
    assert all(any(k.startswith("cpu/generate") and v > 0 for k, v in r.items()) for r in evals), evals[0]


def test_a_finished_run_exports_its_model_at_one_path_whatever_total_steps(tmp_path):
    # the randomwalks PPO/GRPO/RLOO/RFT configs start from <sft checkpoint_dir>/hf_model: a shortened
    # SFT run (total_steps not a multiple of checkpoint_interval) must write it too
    trainer = run("sft", tmp_path, config_overrides=dict(train=dict(total_steps=3, checkpoint_interval=2)))
    final = tmp_path / "ckpts" / "hf_model"
    model = AutoModelForCausalLM.from_pretrained(final).state_dict()
    last = AutoModelForCausalLM.from_pretrained(tmp_path / "ckpts" / "checkpoint_3" / "hf_model").state_dict()
    assert model.keys() == last.keys() and all(torch.equal(model[k], last[k]) for k in model)
    assert trainer.iter_count == 3


def test_sft_loss_falls(tmp_path):
    run("sft", tmp_path, config_overrides=dict(train=dict(total_steps=24)))
    losses = [r["loss"] for r in read_metrics(tmp_path / "ckpts" / "logs") if r["kind"] == "train"]
    assert sum(losses[-4:]) / 4 < 0.85 * sum(losses[:4]) / 4, losses


@pytest.mark.parametrize("method", ["sft", "ppo", "ilql"])
def test_export_loads_in_plain_transformers_and_generates_the_same(method, tmp_path):
    trainer = run(method, tmp_path, config_overrides=dict(train=dict(total_steps=2)))
    export = tmp_path / "ckpts" / "checkpoint_2" / "hf_model"
    model, info = AutoModelForCausalLM.from_pretrained(export, output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    model.eval()
    batch = TOKENIZER(["b", "c"], return_tensors="pt", add_special_tokens=False)
    greedy = dict(max_new_tokens=6, do_sample=False, eos_token_id=TOKENIZER.eos_token_id, pad_token_id=TOKENIZER.pad_token_id)
    ours_model = trainer.unwrapped_model.base_model if method != "sft" else trainer.unwrapped_model
    ours_model.eval()
    expected = ours_model.generate(**batch, **greedy)
    assert torch.equal(model.generate(**batch, **greedy), expected)


def test_resolved_config_is_written_beside_the_checkpoint(tmp_path):
    import yaml

    run("sft", tmp_path, config_overrides=dict(train=dict(total_steps=2)))
    written = yaml.safe_load((tmp_path / "ckpts" / "checkpoint_2" / "config.yml").read_text())
    assert written["train"]["total_steps"] == 2 and written["method"]["name"].lower() == "sftconfig"
    assert written["model"]["model_path"]["model_type"] == "gpt2"


def test_best_checkpoint_follows_the_eval_metric(tmp_path):
    run("ppo", tmp_path, config_overrides=dict(train=dict(total_steps=4, eval_interval=2, save_best=True)))
    best = tmp_path / "ckpts" / "best_checkpoint"
    assert is_complete(best)
    evals = [r for r in read_metrics(tmp_path / "ckpts" / "logs") if r["kind"] == "eval" and r["step"] > 0]
    best_step = max(evals, key=lambda r: r["reward/mean"])["step"]
    state = torch.load(best / "loop_state_0.pt", weights_only=True)
    assert state["iter_count"] == best_step


def test_ppo_exports_each_rollout_phase_to_rollout_logging_dir(tmp_path):
    rollouts = tmp_path / "rollouts"
    run("ppo", tmp_path, config_overrides=dict(train=dict(total_steps=8, rollout_logging_dir=str(rollouts))))
    files = sorted(rollouts.glob("*.json"))
    assert len(files) == 2  # one per finished phase: 4 steps each
    assert len(json.loads(files[0].read_text())) == 16


def test_best_of_n_rollouts_are_refused_not_ignored(tmp_path):
    from rlkit_core.errors import ConfigError

    with pytest.raises(ConfigError, match="method.num_topk_samples"):
        run("ppo", tmp_path, config_overrides=dict(method=dict(num_topk_samples=4)))


def test_a_first_run_says_what_it_does_before_the_progress_display_starts(tmp_path):
    import logging

    records = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    logger = logging.getLogger("rlkit_methods")
    old = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        run("ppo", tmp_path, config_overrides=dict(train=dict(total_steps=1)))
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)
    said = [m for m in records if m.endswith(" ...")]
    assert said[:3] == ["building a new gpt2 model from its config (AccelerateEngine) ...", "making rollouts (generate, then score) ...",
                        "evaluating the eval prompts at step 0 ..."], records


def test_save_total_limit_keeps_the_newest_checkpoints(tmp_path):
    trainer = run("sft", tmp_path, config_overrides=dict(train=dict(
        total_steps=6, checkpoint_interval=2, eval_interval=2, save_total_limit=2)))
    root = tmp_path / "ckpts"
    assert trainer.iter_count == 6
    assert sorted(p.name for p in root.glob("checkpoint_*")) == ["checkpoint_4", "checkpoint_6"]
    assert (root / "hf_model" / "config.json").is_file()


def test_rotation_counts_only_complete_checkpoints_and_never_removes_the_best(tmp_path):
    from rlkit_methods.run.rotation import rotate_checkpoints

    for step in (2, 4, 6, 8):
        (tmp_path / f"checkpoint_{step}").mkdir()
        if step != 8:
            (tmp_path / f"checkpoint_{step}" / "COMPLETE").write_text("")
    (tmp_path / "best_checkpoint").mkdir()
    (tmp_path / "best_checkpoint" / "COMPLETE").write_text("")
    removed = rotate_checkpoints(tmp_path, 1)
    assert sorted(p.name for p in removed) == ["checkpoint_2", "checkpoint_4"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best_checkpoint", "checkpoint_6", "checkpoint_8"]
