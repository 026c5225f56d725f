"""Probes on what a run leaves and reads back: checkpoint files, the metrics log and report,
reward values, resuming with another config, signals."""

from __future__ import annotations

import math
import os
import signal
import time
from pathlib import Path

from probe_bad_inputs import ROOT, cli, handled_call, refuse_call, refuse_cli

SFT = ROOT / "examples" / "randomwalks" / "sft_randomwalks.yml"


class Boom:
    """A pickle that runs code when loaded: it writes the file ``mark``, so that runs at the
    same time each look at their own."""

    def __init__(self, mark: Path) -> None:
        self.mark = mark

    def __reduce__(self):
        return (os.system, (f"echo pwned > {self.mark}",))


def file_cases(tmp: Path) -> list[tuple[str, object]]:
    import torch
    from safetensors.torch import save_file

    from rlkit_methods.run.checkpoint import read_errors

    probes: list[tuple[str, object]] = []

    def add(name, probe):
        probes.append((name, probe))

    # --- 9. checkpoint files -----------------------------------------------------------------------
    def checkpoint(name: str) -> Path:
        folder = tmp / name / "checkpoint_2"
        (folder / "accelerate").mkdir(parents=True)
        save_file({"w": torch.ones(32, 32)}, folder / "accelerate" / "model.safetensors")
        torch.save({"m": torch.zeros(128)}, folder / "accelerate" / "optimizer.bin")
        (folder / "scheduler.json").write_text('{"last_epoch": 2}')
        return folder

    def damaged(name: str, file: str, cut, load):
        def run():
            folder = checkpoint(name)
            path = folder / file
            path.write_bytes(cut(path.read_bytes()))
            with read_errors(folder):
                load(path)
        return refuse_call(run, file.split("/")[-1])

    half = lambda data: data[: len(data) // 2]  # noqa: E731
    load_st = lambda p: __import__("safetensors.torch").torch.load_file(p)  # noqa: E731
    load_pt = lambda p: torch.load(p, weights_only=True)  # noqa: E731
    add("truncated model.safetensors", damaged("c1", "accelerate/model.safetensors", half, load_st))
    add("empty model.safetensors", damaged("c2", "accelerate/model.safetensors", lambda d: b"", load_st))
    add("truncated optimizer.bin", damaged("c3", "accelerate/optimizer.bin", half, load_pt))
    add("random bytes in optimizer.bin", damaged("c4", "accelerate/optimizer.bin", lambda d: os.urandom(len(d)), load_pt))
    add("truncated scheduler.json", damaged("c5", "scheduler.json", half, lambda p: __import__("json").loads(p.read_text())))

    def malicious_state():
        from rlkit_methods.run.state import read_state

        path = tmp / "trainer_state_0.pt"
        torch.save({"iter_count": 3, "evil": Boom(tmp / "pwned")}, path)
        read_state(path)
        if (tmp / "pwned").exists():
            raise AssertionError("code ran")  # turned into "unclear" below; never expected

    add("malicious pickle in a trainer state file", refuse_call(malicious_state, "trainer_state_0.pt"))

    def malicious_engine_file(name: str, file: str):
        def run():  # what accelerate's load_state does: weights_only=True, the file not named
            folder = checkpoint(name)
            torch.save({"state": {}, "evil": Boom(tmp / "pwned")}, folder / file)
            with read_errors(folder):
                torch.load(folder / file, weights_only=True)
            if (tmp / "pwned").exists():
                raise AssertionError("code ran")
        return refuse_call(run, f"{file}: refused")

    add("malicious pickle in accelerate/optimizer.bin", malicious_engine_file("c6", "accelerate/optimizer.bin"))
    add("malicious pickle in accelerate/pytorch_model.bin", malicious_engine_file("c7", "accelerate/pytorch_model.bin"))

    # --- 10. metrics log and report -------------------------------------------------------------------
    from rlkit_methods.run.metrics_log import MetricsLog, read_metrics
    from rlkit_methods.run.end_report import report

    def run_logs(name: str, **metrics) -> Path:
        log = MetricsLog(tmp / name / "logs")
        log.write(0, "eval", {"reward/mean": 0.1})
        log.write(1, "rollout", {"rollout_scores/mean": 1e308, "rollout_scores/std": math.inf, **metrics})
        log.write(1, "train", {"loss": math.nan})
        log.write(2, "eval", {"reward/mean": math.inf})
        return tmp / name

    def report_ok(root: Path, expect: str):
        def check():
            code, lines = cli(["report", str(root)])
            if code != 0:
                return "unclear", " ".join(lines)[:200]
            if expect and not any(expect in line for line in lines):
                return "silent-wrong", f"{expect!r} not shown"
        return check

    add("rlkit report with inf/nan/1e308 metrics", handled_call(report_ok(run_logs("nan"), "-> inf")))
    add("end-of-run report() with nan metrics", handled_call(lambda: report(run_logs("nan2")) and None))
    partial = run_logs("partial")
    with open(partial / "logs" / "metrics.jsonl", "a") as handle:
        handle.write('{"step": 3, "kind": "tr')
    add("rlkit report with a cut-short last line", handled_call(report_ok(partial, "-> inf")))

    def resume_with_partial_line():
        MetricsLog(partial / "logs", resume=True).truncate_after(2)
        if [r["step"] for r in read_metrics(partial / "logs")] != [0, 1, 1, 2]:
            return "silent-wrong", "records lost or kept wrongly"

    add("resume with a cut-short metrics line", handled_call(resume_with_partial_line))
    broken = run_logs("broken")
    lines = (broken / "logs" / "metrics.jsonl").read_text().splitlines()
    (broken / "logs" / "metrics.jsonl").write_text("\n".join([lines[0][:10]] + lines[1:]) + "\n")
    add("rlkit report with a broken inner line", refuse_cli(["report", str(broken)], "metrics.jsonl:1"))
    (tmp / "emptylog" / "logs").mkdir(parents=True)
    (tmp / "emptylog" / "logs" / "metrics.jsonl").write_text("")
    add("rlkit report on an empty log", handled_call(report_ok(tmp / "emptylog", "")))
    add("rlkit report on a folder with no log", refuse_cli(["report", str(tmp)], "no metrics.jsonl"))
    add("rlkit report on a missing folder", refuse_cli(["report", str(tmp / "nowhere")], "no metrics.jsonl"))

    # --- 11. reward values ---------------------------------------------------------------------------
    from rlkit_methods.common.validate import check_rewards, check_scores

    for label, value, expect in [
        ("wrong count", [1.0], "returned 1 scores for 3 samples"), ("None", None, "returned NoneType"),
        ("a string", "good", "returned str"), ("a dict", {"a": 1}, "returned dict"), ("NaN", [1.0, math.nan, 0.0], "nan"),
        ("inf", [math.inf, 0.0, 0.0], "inf"), ("strings", ["1", "2", "3"], "not a number"),
        ("meta tensor", torch.zeros(3, device="meta"), "meta device"), ("meta scalars", [torch.tensor(1.0, device="meta")] * 3, "meta device"),
        ("an empty dense list", [[], [1.0], [1.0]], "empty list"), ("bools", [True, False, True], "not a number"),
    ]:
        add(f"reward returns {label}", refuse_call(lambda value=value: check_scores(value, 3), expect, errors=(ValueError,)))
    add("offline rewards: wrong count", refuse_call(lambda: check_rewards([1.0], 2), "got 1 rewards for 2 samples"))
    add("reward returns a generator of 3 floats", handled_call(
        lambda: None if check_scores((x for x in [1.0, 2.0, 3.0]), 3) == [1.0, 2.0, 3.0] else ("silent-wrong", "")))
    add("reward returns a numpy array", handled_call(lambda: None if check_scores(__import__("numpy").ones(3), 3) == [1.0] * 3 else ("silent-wrong", "")))

    from rlkit_methods.loop.evaluation import check_metrics

    def my_metric(samples, **kwargs):
        return {}

    for label, value, expect in [
        ("a list", [0.5, 0.5, 0.5], "my_metric returned list"), ("the wrong count", {"len": [1.0, 2.0]}, "'len' has 2 values for 3 samples"),
        ("strings", {"mood": ["good", "bad", "ok"]}, "my_metric: metric 'mood' holds non-numbers"), ("None", None, "returned NoneType"),
    ]:
        add(f"metric returns {label}", refuse_call(lambda value=value: check_metrics(value, my_metric, 3), expect))
    add("metric returns a NaN", handled_call(lambda: None if math.isnan(check_metrics({"m": [math.nan] * 3}, my_metric, 3)["m"][0]) else ("silent-wrong", "")))

    # --- 12. resuming with another config ------------------------------------------------------------
    from rlkit_core import load_config
    from rlkit_methods.run.resume import check_resume_config

    tiny = {"model.model_path": {"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2, "vocab_size": 23}}
    saved = tmp / "resume" / "checkpoint_4"
    saved.mkdir(parents=True)
    load_config(SFT, tiny).save_yaml(saved / "config.yml")
    for label, change, expect in [
        ("another batch_size", {"train.batch_size": 7}, "train.batch_size: 7, but"), ("another seed", {"train.seed": 1}, "train.seed"),
        ("another architecture", {"model.model_path": {**tiny["model.model_path"], "n_embd": 64}}, "do not fit another architecture"),
        ("another arch type", {"model.model_arch_type": "seq2seq"}, "model.model_arch_type"),
        ("other frozen layers", {"model.num_layers_unfrozen": 1}, "num_layers_unfrozen"),
    ]:
        add(f"resume with {label}", refuse_call(lambda change=change: check_resume_config(saved, load_config(SFT, {**tiny, **change})), expect))
    add("resume with more total_steps", handled_call(lambda: check_resume_config(saved, load_config(SFT, {**tiny, "train.total_steps": 900}))))
    from rlkit_methods.run.resume import steps_left

    add("resume a finished run", handled_call(lambda: None if steps_left(500, 500) == 0 else ("silent-wrong", "steps left")))

    # --- 13. signals -------------------------------------------------------------------------------------
    from rlkit_methods.run.signals import stop_on_signals

    def first_signal_is_a_flag(signum, code):
        def check():
            with stop_on_signals() as stop:
                os.kill(os.getpid(), signum)
                deadline = time.time() + 5
                while not stop.requested and time.time() < deadline:
                    time.sleep(0.01)
            if stop.exit_code != code:
                return "silent-wrong", f"exit code {stop.exit_code}"
        return check

    add("SIGINT during training", handled_call(first_signal_is_a_flag(signal.SIGINT, 130)))
    add("SIGTERM during training", handled_call(first_signal_is_a_flag(signal.SIGTERM, 143)))
    return probes

