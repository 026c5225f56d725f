"""End-to-end probes through the real ``rlkit run`` (a few minutes; ``probe_bad_inputs.py --runs``):
run folders, resume and signals as the loop handles them today."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from probe_bad_inputs import ROOT

SFT = str(ROOT / "examples" / "randomwalks" / "sft_randomwalks.yml")
TINY = ["--set", "model.model_path.n_layer=1", "--set", "model.model_path.n_embd=16", "--set", "model.model_path.n_head=2",
        "--set", "train.batch_size=16", "--set", "train.checkpoint_interval=2", "--set", "train.eval_interval=1000",
        "--set", "method.gen_kwargs.max_new_tokens=2"]
RLKIT = [sys.executable, "-c", "import sys; from rlkit_core.cli import main; sys.argv[0] = 'rlkit'; main(sys.argv[1:])"]


def rlkit_run(ckpts: Path, *sets: str, steps: int = 4, wait: bool = True):
    args = RLKIT + ["run", SFT, *TINY, "--set", f"train.total_steps={steps}", "--set", f"scheduler.kwargs.T_max={steps}",
                    "--set", f"train.checkpoint_dir={ckpts}", *[a for s in sets for a in ("--set", s)]]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if not wait:
        # Ctrl-C as in a terminal: a shell's background job (`&`, nohup) would pass SIGINT on ignored
        return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    result = subprocess.run(args, capture_output=True, text=True, env=env)
    return result.returncode, [line for line in result.stderr.splitlines() if line.startswith(("error:", "warning:"))]


def files(root: Path) -> dict:
    return {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file() and p.suffix != ".lock" and p.name != "report.png"}


def refused(code: int, lines: list[str], expect: str):
    if code == 0:
        return None
    ok = len([line for line in lines if line.startswith("error:")]) == 1 and expect in " ".join(lines)
    return ("clear" if ok else "unclear"), " ".join(lines)[:200]


def run_cases(tmp: Path) -> list[tuple[str, object]]:
    probes: list[tuple[str, object]] = []
    base = tmp / "runs" / "first"
    state: dict = {}

    def first_run():
        code, lines = rlkit_run(base)
        state["files"] = files(base)
        return ("handled", "") if code == 0 else ("unclear", " ".join(lines)[:200])

    def new_run_into_used_folder():
        code, lines = rlkit_run(base, "train.seed=7")
        outcome = refused(code, lines, "holds another run's files")
        after = files(base)
        if any(after.get(k) != v for k, v in state["files"].items() if "metrics" in str(k) or "checkpoint_" in str(k)):
            return "data-lost", "the first run's checkpoints or metrics were overwritten"
        return outcome or ("silent-wrong", "a second run wrote into the first run's folder")

    def resume_with_other_batch_size():
        code, lines = rlkit_run(base, f"train.resume_from_checkpoint={base}", "train.batch_size=8", steps=6)
        return refused(code, lines, "train.batch_size") or ("silent-wrong", "resumed with another batch_size without a word")

    def resume_finished_run():
        code, lines = rlkit_run(base, f"train.resume_from_checkpoint={base}")
        if code != 0:
            return "unclear", " ".join(lines)[:200]
        if any(k.name == "checkpoint_5" for k in map(Path, map(str, files(base)))) or (base / "checkpoint_5").exists():
            return "silent-wrong", "trained past total_steps"

    def resume_other_architecture():
        code, lines = rlkit_run(base, f"train.resume_from_checkpoint={base}", "model.model_path.n_layer=2", steps=8)
        return refused(code, lines, "") or ("silent-wrong", "resumed into another architecture")

    def resume_with_a_damaged_file(name: str, damage):
        def probe():
            import shutil

            folder = tmp / "runs" / name
            shutil.copytree(base, folder)
            path = folder / "checkpoint_4" / "accelerate" / "optimizer.bin"
            damage(path)
            code, lines = rlkit_run(folder, f"train.resume_from_checkpoint={folder / 'checkpoint_4'}", steps=6)
            if (tmp / "pwned").exists():
                return "data-lost", "the planted pickle ran"
            return refused(code, lines, "optimizer.bin") or ("silent-wrong", "resumed from a damaged checkpoint")
        return probe

    def cut_in_half(path: Path) -> None:
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

    def plant_code(path: Path) -> None:
        import torch

        from cases_files import Boom

        torch.save({"state": {}, "evil": Boom(tmp / "pwned")}, path)

    def two_runs_at_once():
        folder = tmp / "runs" / "together"
        first = rlkit_run(folder, steps=400, wait=False)
        time.sleep(8)  # the first one is training
        code, lines = rlkit_run(folder, f"train.resume_from_checkpoint={folder}", steps=400)
        first.send_signal(signal.SIGKILL)
        first.wait()
        return refused(code, lines, "another rlkit run") or ("silent-wrong", "two runs in one folder")

    def signal_during_training(signum: int, code_expected: int):
        def probe():
            folder = tmp / "runs" / f"signal{signum}"
            proc = rlkit_run(folder, steps=100000, wait=False)
            deadline = time.time() + 120
            while time.time() < deadline and not any(folder.glob("checkpoint_*")):  # training, however loaded the machine
                time.sleep(0.2)
            proc.send_signal(signum)
            _, err = proc.communicate(timeout=120)
            lines = [line for line in err.splitlines() if line.startswith("error:")]
            if proc.returncode != code_expected or len(lines) != 1:
                return "unclear", f"exit {proc.returncode}: {lines[:2]}"
            saved = sorted((p.name for p in folder.glob("checkpoint_*")), key=lambda name: int(name.split("_")[1]))
            return "clear", f"exit {proc.returncode}; {lines[0][:120]}; checkpoints: {saved[-1:] or 'none'}"
        return probe

    def handled_if_none(probe):
        return lambda: probe() or ("handled", "")

    probes += [(name, handled_if_none(probe)) for name, probe in [
        ("run: a first run", first_run),
        ("run: a new run into that run's folder", new_run_into_used_folder),
        ("run: resume with another batch_size", resume_with_other_batch_size),
        ("run: resume a finished run", resume_finished_run),
        ("run: resume with another architecture", resume_other_architecture),
        ("run: resume with accelerate/optimizer.bin cut in half", resume_with_a_damaged_file("cut", cut_in_half)),
        ("run: resume with os.system pickled into accelerate/optimizer.bin", resume_with_a_damaged_file("planted", plant_code)),
        ("run: two runs at once in one folder", two_runs_at_once),
        ("run: Ctrl-C during training", signal_during_training(signal.SIGINT, 130)),
        ("run: SIGTERM during training", signal_during_training(signal.SIGTERM, 143)),
    ]]
    return probes
