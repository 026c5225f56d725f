"""Round 3, unclear: what `rlkit config validate` can catch without weights, and one clear line
where a traceback or a misleading line came before."""

from __future__ import annotations

import codecs
import json
import os
from pathlib import Path

from r3_common import PPO, SFT, check, raises, refuse, validate, write


def cases(tmp: Path) -> list[tuple[str, object]]:
    probes: list[tuple[str, object]] = []

    def add(name, probe):
        probes.append((name, probe))

    for config, key, expect in [
        (SFT, "optimizer.kwargs.lr=.nan", "optimizer.kwargs.lr"), (SFT, "optimizer.kwargs.lr=-0.001", "optimizer.kwargs.lr"),
        (SFT, "optimizer.kwargs.lr=.inf", "optimizer.kwargs.lr"), (SFT, "optimizer.kwargs.lr=abc", "optimizer.kwargs.lr"),
        (SFT, "train.seed=-1", "train.seed"), (SFT, "train.seed=1208925819614629174706176", "train.seed"),
        (SFT, "model.model_path.n_head=5", "n_head"), (SFT, "model.model_path.n_embd=15", "n_head"),
        (SFT, "optimizer.kwargs.eps=-1", "optimizer.kwargs.eps"), (SFT, "optimizer.kwargs.weight_decay=-0.1", "optimizer.kwargs.weight_decay"),
        (SFT, "optimizer.kwargs.betas=[0.9, 1.5]", "optimizer.kwargs.betas"), (SFT, "optimizer.kwargs.betas=[0.9]", "optimizer.kwargs.betas"),
        (SFT, "scheduler.kwargs.eta_min=-1", "scheduler.kwargs.eta_min"), (SFT, "scheduler.kwargs.T_max=0", "scheduler.kwargs.T_max"),
        (SFT, "model.model_path.n_positions=4", "n_positions"),
        (SFT, "data.eval_prompts={pipeline: randomwalks_prompts, kwargs: {repet: 2}}", "repet"),
        (SFT, "data.samples={pipeline: randomwalks_walks, kwargs: {with_reward: true}}", "with_reward"),
        (PPO, "reward={name: randomwalks, kwargs: {nope: 1}}", "nope"),
    ]:
        add(f"validate {key[:60]}", refuse(validate(config, key), expect, accepted="unclear"))

    # YAML reads 3e-4 (no dot) as a string: a number is meant
    def number_without_dot(key, value):
        def probe():
            from rlkit_core import load_config

            path = write(tmp / f"nodot{len(probes)}.yml", Path(SFT).read_text().replace("lr: 3.0e-4", f"lr: {value}")
                         .replace("eta_min: 3.0e-4", f"eta_min: {value}"))
            config = load_config(path)
            got = config.optimizer.kwargs["lr"] if key == "lr" else config.scheduler.kwargs["eta_min"]
            return None if isinstance(got, float) and got == float(value) else ("unclear", f"{key} read as {got!r}")
        return check(probe)

    add("optimizer.kwargs.lr: 3e-4 without a dot", number_without_dot("lr", "3e-4"))
    add("scheduler.kwargs.eta_min: 1e-5 without a dot", number_without_dot("eta_min", "1e-5"))

    # files
    from rlkit_methods.data.sources import file_source

    u16 = write(tmp / "u16.txt", codecs.BOM_UTF16_LE + "ab\ncd\n".encode("utf-16-le"))
    add("UTF-16 samples file", check(lambda: None if file_source(str(u16)) == ["ab", "cd"] else ("silent-wrong", str(file_source(str(u16))))))
    binary = write(tmp / "bin.txt", bytes(range(128, 256)) * 4)
    add("binary samples file", raises(lambda: file_source(str(binary)), "bin.txt", accepted="silent-wrong"))
    bin_jsonl = write(tmp / "bin.jsonl", b"\xff\xfe\x00garbage\x89PNG")
    add("binary .jsonl samples file", raises(lambda: file_source(str(bin_jsonl)), "bin.jsonl", accepted="silent-wrong"))
    a_file = write(tmp / "rollouts-file", "x")
    add("rollout_logging_dir is a file", refuse(validate(PPO, f"train.rollout_logging_dir={a_file}"), "train.rollout_logging_dir", accepted="unclear"))
    add("logging_dir is a file", refuse(validate(SFT, f"train.logging_dir={a_file}"), "train.logging_dir", accepted="unclear"))
    add("checkpoint_dir is a file", refuse(validate(SFT, f"train.checkpoint_dir={a_file}"), "train.checkpoint_dir", accepted="unclear"))

    def report_on(name, lines):
        def probe():
            from r3_code import cli_out

            root = tmp / f"rep-{name}"
            write(root / "logs" / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in lines))
            code, out, err = cli_out(["report", str(root)])
            errs = [line for line in err.splitlines() if line.strip()]
            if code == 0:
                return "handled", ""
            if "Traceback" in err or len(errs) != 1 or "metrics.jsonl" not in err:
                return "unclear", err[:200]
            return "clear", errs[0][:200]
        return probe

    add("rlkit report on records without kind/time", report_on("nokind", [{"step": 1, "loss": 1.0}, {"step": 2, "loss": 0.5}]))
    add("rlkit report on records with step a string", report_on("strstep", [{"step": "one", "kind": "train", "time": 1, "loss": 1.0}]))
    add("rlkit report on records with a list metric", report_on("list", [{"step": 1, "kind": "train", "time": 1, "loss": [1, 2]}]))

    add("/dev/zero as config", refuse(["config", "validate", "/dev/zero"], "not a regular file", accepted="unclear"))
    add("/dev/null as config", refuse(["config", "validate", "/dev/null"], "/dev/null", accepted="unclear"))
    fifo = tmp / "fifo.yml"
    os.mkfifo(fifo)
    add("a FIFO as config", refuse(["config", "validate", str(fifo)], "not a regular file", accepted="unclear"))
    return probes
