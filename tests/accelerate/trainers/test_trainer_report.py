"""The end-of-run report and `rlkit report`."""

import pytest
from rich.console import Console

from rlkit_methods.run.end_report import report, summary
from rlkit_core.cli import main
from walks_setup import run

pytestmark = pytest.mark.slow  # trains real runs (rlkit_core.testing.lanes)


def test_every_run_ends_with_a_report_and_a_plot(tmp_path):
    run("ppo", tmp_path, config_overrides=dict(train=dict(total_steps=4, eval_interval=2)))
    png = tmp_path / "ckpts" / "report.png"
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    info = summary(tmp_path / "ckpts")
    assert info["score"] == "reward/mean" and info["steps"] == 4
    assert [e["step"] for e in info["evals"]] == [0, 2, 4]
    assert info["before"] == info["evals"][0]["reward/mean"] and info["after"] == info["evals"][-1]["reward/mean"]
    assert {"rollout: generate", "rollout: score", "train: forward", "evaluation"} <= set(info["seconds"])
    assert info["rates"]["rollout: generate"] > 0
    assert [s["step"] for s in info["samples"]] == [0, 2, 4]


def test_the_report_shows_the_same_prompts_before_and_after(tmp_path):
    run("sft", tmp_path, config_overrides=dict(train=dict(total_steps=2)))
    console = Console(record=True, width=200)
    info = report(tmp_path / "ckpts", console=console)
    text = console.export_text()
    first, last = info["samples"][0]["samples"], info["samples"][-1]["samples"]
    assert [r["prompt"] for r in first] == [r["prompt"] for r in last]
    assert "metrics/lengths: 100 -> " in text and "The same eval prompts" in text
    assert "Where the time went" in text


def test_rlkit_report_cli(tmp_path, capsys):
    run("sft", tmp_path, config_overrides=dict(train=dict(total_steps=2)))
    (tmp_path / "ckpts" / "report.png").unlink()
    assert main(["report", str(tmp_path / "ckpts")]) == 0
    assert (tmp_path / "ckpts" / "report.png").is_file()
    assert main(["report", str(tmp_path / "nowhere")]) == 1  # a runtime error: one line, exit 1
    assert "no metrics.jsonl" in capsys.readouterr().err
