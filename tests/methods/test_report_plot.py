"""report.png a reader can read: titled with the run, labelled axes, one quantity per axis
scale, no empty panels, written into the run's folder."""

from __future__ import annotations

import json

from rlkit_methods.run.end_report import figure, report, summary


def write_jsonl(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def ppo_records():
    records = []
    for step in (0, 8, 16):
        records.append({"step": step, "kind": "rollout", "time": float(step), "rollout_scores/mean": 0.1 * step,
                        "policy/sqrt_kl": 0.2 * step, "kl_ctl_value": 0.02})
        records.append({"step": step, "kind": "eval", "time": float(step), "reward/mean": 0.01 * step})
        records += [{"step": step + i, "kind": "train", "time": float(step + i), "losses/total_loss": 1.0 / (step + i),
                     "losses/policy_loss": -0.1, "losses/value_loss": 0.5} for i in range(1, 9)]
    return records


def axes_by_title(fig):
    return {ax.get_title(): ax for ax in fig.axes if ax.get_title()}


def test_ppo_plot_labels_every_axis_and_gives_the_kl_coefficient_its_own(tmp_path):
    write_jsonl(tmp_path / "my_run" / "logs" / "metrics.jsonl", ppo_records())
    fig = figure(summary(tmp_path / "my_run"))
    panels = axes_by_title(fig)
    assert list(panels) == ["eval reward", "rollout score", "KL to the reference", "losses"]
    for ax in panels.values():
        assert ax.get_xlabel() == "optimizer step" and ax.get_ylabel()
        assert ax.get_lines(), ax.get_title()
    kl = panels["KL to the reference"]
    assert [line.get_label() for line in kl.get_lines()] == ["policy/sqrt_kl"]
    twins = [ax for ax in fig.axes if ax is not kl and ax.bbox.bounds == kl.bbox.bounds]
    assert len(twins) == 1 and twins[0].get_ylabel() == "KL coefficient"
    assert [line.get_label() for line in twins[0].get_lines()] == ["kl_ctl_value"]
    assert fig._suptitle.get_text() == "my_run: reward/mean 0.000 -> 0.160 in 24 steps"


def test_ilql_plot_has_a_panel_per_metric_and_none_empty(tmp_path):
    """randomwalks: lengths (0-100) and optimality (0-1) each on their own axis; no KL panels."""
    records = [{"step": s, "kind": "eval", "time": float(s), "metrics/lengths": 90.0 - s, "metrics/optimality": s / 100}
               for s in (0, 50, 100)]
    records += [{"step": s, "kind": "train", "time": float(s), "losses/loss": 1.0 / s} for s in range(1, 101)]
    write_jsonl(tmp_path / "ilql" / "logs" / "metrics.jsonl", records)
    fig = figure(summary(tmp_path / "ilql"))
    panels = axes_by_title(fig)
    assert list(panels) == ["eval lengths", "eval optimality", "losses"]
    assert len(fig.axes) == 3  # the fourth cell of the grid is removed, not left empty
    assert panels["eval lengths"].get_ylabel() == "metrics/lengths"
    assert [line.get_label() for line in panels["eval optimality"].get_lines()] == ["metrics/optimality"]


def test_swept_values_share_their_metric_panel(tmp_path):
    records = [{"step": s, "kind": "eval", "time": float(s), "metrics/sentiment@beta=0": 0.1, "metrics/sentiment@beta=1": 0.2}
               for s in (0, 10)]
    write_jsonl(tmp_path / "run" / "logs" / "metrics.jsonl", records)
    panels = axes_by_title(figure(summary(tmp_path / "run")))
    assert list(panels) == ["eval sentiment"]
    labels = [line.get_label() for line in panels["eval sentiment"].get_lines()]
    assert labels == ["metrics/sentiment@beta=0", "metrics/sentiment@beta=1"]


def test_with_a_logging_dir_the_report_lands_in_it_and_is_named_after_it(tmp_path, capsys):
    """train.logging_dir: runs/exp_7 (not <checkpoint_dir>/logs): report.png goes there."""
    logs = tmp_path / "runs" / "exp_7"
    write_jsonl(logs / "metrics.jsonl", ppo_records())
    info = report(logs)
    assert info["plot"] == logs / "report.png" and (logs / "report.png").is_file()
    assert not (tmp_path / "runs" / "report.png").exists()
    assert figure(info)._suptitle.get_text().startswith("exp_7: ")


def test_the_run_name_titles_the_plot(tmp_path):
    run = tmp_path / "ckpts"
    write_jsonl(run / "logs" / "metrics.jsonl", ppo_records())
    (run / "checkpoint_24").mkdir(parents=True)
    (run / "checkpoint_24" / "config.yml").write_text("train:\n  run_name: sentiment-lr3e-4\n")
    info = report(run)
    assert info["plot"] == run / "report.png"
    assert figure(info)._suptitle.get_text().startswith("sentiment-lr3e-4: reward/mean")


def end_of_run(checkpoint_dir, logging_dir):
    """The report rlkit-methods writes when a run ends (hook rlkit_train_end)."""
    from types import SimpleNamespace

    from rlkit_methods.plugin import rlkit_train_end

    trainer = SimpleNamespace(checkpoint_dir=checkpoint_dir, logging_dir=logging_dir)
    rlkit_train_end(trainer=trainer, error=None, is_main_process=True)


def test_at_the_end_of_a_run_a_logging_dir_named_logs_elsewhere_gets_the_report(tmp_path, capsys):
    """train.logging_dir: shared/logs, outside checkpoint_dir ckpts/exp_9: report.png goes into
    shared/logs (not shared/), titled with the run's folder, exp_9 (not 'shared')."""
    run, logs = tmp_path / "ckpts" / "exp_9", tmp_path / "shared" / "logs"
    write_jsonl(logs / "metrics.jsonl", ppo_records())
    (run / "checkpoint_24").mkdir(parents=True)
    (run / "checkpoint_24" / "config.yml").write_text("train:\n  total_steps: 24\n")
    end_of_run(run, logs)
    assert (logs / "report.png").is_file()
    assert not (tmp_path / "shared" / "report.png").exists() and not (run / "report.png").exists()
    assert figure(summary(logs, checkpoint_dir=run))._suptitle.get_text().startswith("exp_9: reward/mean")
    # its config is the run's: a run_name there titles it
    (run / "checkpoint_24" / "config.yml").write_text("train:\n  run_name: lr-3e-4\n")
    assert figure(summary(logs, checkpoint_dir=run))._suptitle.get_text().startswith("lr-3e-4: ")


def test_at_the_end_of_a_run_the_default_logs_put_the_report_in_the_checkpoint_dir(tmp_path, capsys):
    run = tmp_path / "ckpts"
    write_jsonl(run / "logs" / "metrics.jsonl", ppo_records())
    end_of_run(run, run / "logs")
    assert (run / "report.png").is_file() and not (run / "logs" / "report.png").exists()
