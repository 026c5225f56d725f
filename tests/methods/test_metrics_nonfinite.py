"""NaN and inf metrics are logged and shown as such and never crash a report; a metrics log
cut short by a kill blocks neither resume nor `rlkit report` (issue 16, items 4 and 6)."""

import math

import pytest
from rich.console import Console

from rlkit_core.errors import RlkitError
from rlkit_methods.run.metrics_log import METRICS_FILE, SAMPLES_FILE, MetricsLog, read_metrics
from rlkit_methods.run.end_report import report


def huge_reward_run(root):
    log = MetricsLog(root / "logs")
    log.write(0, "eval", {"reward/mean": 0.5})
    log.write(1, "rollout", {"rollout_scores/mean": 1e308, "rollout_scores/std": math.inf, "policy/sqrt_kl": math.nan})
    log.write(1, "train", {"losses/total_loss": math.nan, "time/forward": 0.1})
    log.write(2, "eval", {"reward/mean": math.inf})
    log.write_samples(0, [{"prompt": "go [b]", "output": "x", "reward": 0.5}])
    log.write_samples(2, [{"prompt": "go [b]", "output": "y", "reward": math.nan}])
    return root


def test_non_finite_metrics_are_logged_as_such_and_read_back_as_floats(tmp_path):
    root = huge_reward_run(tmp_path)
    text = (root / "logs" / METRICS_FILE).read_text()
    assert '"rollout_scores/std": "inf"' in text and '"policy/sqrt_kl": "nan"' in text  # plain JSON
    assert "NaN" not in (root / "logs" / SAMPLES_FILE).read_text()
    records = read_metrics(root / "logs")
    assert records[1]["rollout_scores/std"] == math.inf and math.isnan(records[1]["policy/sqrt_kl"])
    assert records[1]["rollout_scores/mean"] == 1e308 and records[3]["reward/mean"] == math.inf


def test_the_report_shows_nan_and_inf_and_still_draws(tmp_path):
    root = huge_reward_run(tmp_path)
    console = Console(record=True, width=200)
    info = report(root, console)
    text = console.export_text()
    assert "reward/mean: 0.5 -> inf (+inf) over 2 steps" in text
    assert "y [nan]" in text and "go [b]" in text  # shown, not eaten as markup
    assert (root / "report.png").is_file() and info["plot"] == root / "report.png"


def test_rlkit_report_on_a_huge_reward_run_exits_0(tmp_path, capsys, rlkit_host):
    from rlkit_core.cli import main

    root = huge_reward_run(tmp_path)
    assert main(["report", str(root)]) == 0, capsys.readouterr().err
    assert "-> inf" in capsys.readouterr().err


def test_a_last_line_cut_short_blocks_neither_report_nor_resume(tmp_path):
    root = huge_reward_run(tmp_path)
    path = root / "logs" / METRICS_FILE
    with open(path, "a") as handle:
        handle.write('{"step": 3, "kind": "tra')  # killed while writing
    assert [r["step"] for r in read_metrics(root / "logs")] == [0, 1, 1, 2]
    report(root, Console(record=True))
    log = MetricsLog(root / "logs", resume=True)
    log.truncate_after(1)
    log.write(2, "train", {"loss": 1.0})
    assert [r["step"] for r in read_metrics(root / "logs")] == [0, 1, 1, 2]
    assert path.read_text().endswith('"loss": 1.0}\n')


def test_a_broken_line_inside_the_log_names_the_file_and_line(tmp_path):
    root = huge_reward_run(tmp_path)
    path = root / "logs" / METRICS_FILE
    lines = path.read_text().splitlines()
    lines[1] = lines[1][:20]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(RlkitError, match=rf"{path}:2: not a metrics record"):
        read_metrics(root / "logs")
