"""The report from a hand-written run directory: scores, sample table, time, rates, plot."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from rlkit_methods.run.end_report import report, summary
from rlkit_core.cli import main


def write_jsonl(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def rollout(step, score, kl):
    # 100 generated tokens in 2 s, 400 forward tokens in 4 s, scored in 0.5 s
    return {"step": step, "kind": "rollout", "time": 100.0 + step, "rollout_scores/mean": score, "policy/sqrt_kl": kl,
            "time/rollout_generate": 2.0, "time/rollout_score": 0.5, "time/rollout_forward": 4.0,
            "tokens_per_second/generate": 50.0, "tokens_per_second/forward": 100.0}


def train(step, loss):
    return {"step": step, "kind": "train", "time": 100.5 + step, "losses/total_loss": loss, "losses/policy_loss": -loss,
            "time/forward": 1.5, "time/backward": 0.5}


@pytest.fixture
def ppo_run(tmp_path):
    """A PPO run of 4 steps: rollouts at 0 and 2 (ppo_epochs 2), evaluations at 0 and 4."""
    run = tmp_path / "run"
    records = [rollout(0, 0.1, 0.0), {"step": 0, "kind": "eval", "time": 101.0, "time/generate": 3.0, "reward/mean": 0.2}]
    records += [train(1, 0.5), train(2, 0.4), rollout(2, 0.3, 0.2), train(3, 0.3), train(4, 0.2)]
    records += [{"step": 4, "kind": "eval", "time": 160.0, "time/generate": 3.0, "reward/mean": 0.65}]
    write_jsonl(run / "logs" / "metrics.jsonl", records)
    prompts = ["I loved", "This film", "The plot"]
    write_jsonl(run / "logs" / "samples.jsonl", [
        {"step": 0, "samples": [{"prompt": p, "output": f" was dull {i}", "reward": -0.3} for i, p in enumerate(prompts)]},
        {"step": 4, "samples": [{"prompt": p, "output": f" was great {i}", "reward": 0.6} for i, p in enumerate(prompts)]},
    ])
    (run / "checkpoint_4").mkdir()
    (run / "checkpoint_4" / "config.yml").write_text("method:\n  name: PPOConfig\n  ppo_epochs: 2\n")
    return run


def test_summary_of_a_ppo_run(ppo_run):
    info = summary(ppo_run)
    assert info["steps"] == 4 and info["wall"] == pytest.approx(60.0 + 6.5)  # from the start of the first rollout
    assert (info["score"], info["before"], info["after"]) == ("reward/mean", 0.2, 0.65)
    assert info["seconds"] == pytest.approx({
        "rollout: generate": 4.0, "rollout: score": 1.0, "rollout: reference + value forward": 8.0,
        "train: forward": 6.0, "train: backward": 2.0, "evaluation": 6.0,
    })
    # 200 generated tokens (2 rollouts), scored in 1 s; 800 forward tokens in 8 s, trained on
    # twice (ppo_epochs 2) in 8 s of forward + backward
    assert info["rates"] == pytest.approx({
        "rollout: generate": 50.0, "rollout: score": 200.0, "rollout: reference + value forward": 100.0,
        "train: forward + backward": 200.0,
    })


def test_the_printed_report(ppo_run):
    console = Console(record=True, width=200)
    info = report(ppo_run, console=console)
    text = console.export_text()
    assert "reward/mean: 0.2 -> 0.65 (+0.45) over 4 steps in 1.1 min" in text
    for i, prompt in enumerate(["I loved", "This film", "The plot"]):
        assert f"{prompt}" in text and f"was dull {i} [-0.3]" in text and f"was great {i} [0.6]" in text
    assert "step 0" in text and "step 4" in text
    assert "rollout: reference + value forward" in text and "train: forward + backward" in text
    png = ppo_run / "report.png"
    assert info["plot"] == png and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_a_saved_config_the_training_rate_is_left_out(ppo_run):
    (ppo_run / "checkpoint_4" / "config.yml").unlink()
    assert "train: forward + backward" not in summary(ppo_run)["rates"]


def test_a_swept_setting_gets_a_score_and_rows_each(tmp_path):
    """ILQL's gen_kwargs.beta: [0, 1]: one score per beta, and a beta column in the table."""
    run = tmp_path / "ilql"
    evals = [{"step": s, "kind": "eval", "time": float(s), "metrics/sentiment@beta=0": b0, "metrics/sentiment@beta=1": b1}
             for s, b0, b1 in [(0, 0.1, 0.12), (10, 0.2, 0.5)]]
    train_rows = [{"step": s, "kind": "train", "time": float(s), "losses/loss": 1.0 / s} for s in range(1, 11)]
    write_jsonl(run / "logs" / "metrics.jsonl", evals[:1] + train_rows + evals[1:])
    rows = lambda tag: [{"prompt": f"p{i}", "output": f"{tag}{i}b{beta}", "sentiment": 0.1, "beta": beta}
                        for beta in (0, 1) for i in range(8)]
    write_jsonl(run / "logs" / "samples.jsonl", [{"step": 0, "samples": rows("old")}, {"step": 10, "samples": rows("new")}])
    console = Console(record=True, width=200)
    info = report(run / "logs", console=console)  # the logs folder itself is accepted too
    assert info["scores"] == {"metrics/sentiment@beta=0": (0.1, 0.2), "metrics/sentiment@beta=1": (0.12, 0.5)}
    assert info["sweep"] == "beta" and info["rates"] == {}
    text = console.export_text()
    assert "metrics/sentiment@beta=1: 0.12 -> 0.5 (+0.38) over 10 steps" in text
    assert "beta" in text and "old0b1" in text and "new0b1" in text and "old0b0" in text
    assert "old6b0" not in text  # at most 6 rows per beta
    assert (run / "report.png").is_file()


def test_rlkit_report_exit_codes(ppo_run, tmp_path, capsys):
    assert main(["report", str(ppo_run)]) == 0
    assert "reward/mean: 0.2 -> 0.65" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing")]) == 1
    err = capsys.readouterr().err
    assert "no metrics.jsonl here or in logs/" in err and len(err.strip().splitlines()) == 1
    assert main(["report"]) == 2  # RUN_DIR is required


def test_rlkit_report_plot_elsewhere_leaves_the_run_folder_alone(ppo_run, tmp_path, capsys):
    # the README redraws the committed docs/images/ppo_smollm2 logs without writing into the checkout
    before = sorted(p.relative_to(ppo_run) for p in ppo_run.rglob("*"))
    assert main(["report", str(ppo_run), "--plot", str(tmp_path / "elsewhere.png")]) == 0
    assert (tmp_path / "elsewhere.png").stat().st_size > 0
    assert sorted(p.relative_to(ppo_run) for p in ppo_run.rglob("*")) == before
