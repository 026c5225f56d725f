"""Fault injection: 20 short `rlkit run`s SIGKILLed at random points (at random times, right
after a random optimizer step, just before or just after a checkpoint is renamed into place,
halfway through writing a checkpoint file), each
resumed: every resume ends with exactly the weights and losses of an uninterrupted run, or
refuses in one clear line (issue 16, must-show). Runs are forked from one process that has
imported everything once (fault_zygote.py), so the whole test takes about a minute."""

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TOTAL = 12
ARGS = [
    "run", str(ROOT / "examples" / "randomwalks" / "sft_randomwalks.yml"),
    "--set", "model.model_path.n_layer=1", "--set", "model.model_path.n_embd=16", "--set", "model.model_path.n_head=2",
    "--set", "train.batch_size=16", "--set", f"train.total_steps={TOTAL}", "--set", "train.checkpoint_interval=2",
    "--set", "train.eval_interval=1000", "--set", f"scheduler.kwargs.T_max={TOTAL}",
    "--set", "method.gen_kwargs.max_new_tokens=2",
]


class Zygote:
    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, str(HERE / "fault_zygote.py")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, cwd=str(ROOT))
        assert self.answer()["ready"]

    def answer(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith("@@"):
                return json.loads(line[2:])
        raise AssertionError("the zygote died")

    def run(self, ckpts: Path, log: Path, kill=None, resume=False) -> int:
        prompts = log.parent / "eval_prompts.txt"  # two start letters: evaluation stays short
        prompts.write_text("a\nb\n")
        argv = ARGS + ["--set", f"train.checkpoint_dir={ckpts}", "--set", f"data.eval_prompts={prompts}"]
        if resume:
            argv += ["--set", f"train.resume_from_checkpoint={ckpts}"]
        self.proc.stdin.write(json.dumps({"argv": argv, "log": str(log), "kill": kill}) + "\n")
        self.proc.stdin.flush()
        return self.answer()["rc"]

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def final_weights(ckpts: Path) -> dict:
    from safetensors.torch import load_file

    files = sorted((ckpts / f"checkpoint_{TOTAL}" / "hf_model").glob("*.safetensors"))
    assert files, f"no exported weights in {ckpts}/checkpoint_{TOTAL}"
    out = {}
    for path in files:
        out.update(load_file(path))
    return out


def losses(ckpts: Path) -> dict:
    from rlkit_methods.run.metrics_log import read_metrics

    return {r["step"]: r.get("loss", r.get("losses/loss")) for r in read_metrics(ckpts / "logs") if r["kind"] == "train"}


def error_lines(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.startswith("error:")]


@pytest.mark.slow
def test_sigkill_at_random_points_then_resume_is_exact_or_refused(tmp_path):
    import torch

    zygote = Zygote()
    try:
        reference = tmp_path / "reference"
        start = time.time()
        assert zygote.run(reference, tmp_path / "reference.log") == 0, (tmp_path / "reference.log").read_text()[-3000:]
        duration = time.time() - start
        # random times from when the first checkpoint was written: most of a short run is start-up,
        # and kills there only test the refusal (every one landed there when drawn from 0.1 s)
        first_checkpoint = (reference / "checkpoint_2" / "COMPLETE").stat().st_mtime - start
        expected_weights, expected_losses = final_weights(reference), losses(reference)
        assert sorted(expected_losses) == list(range(1, TOTAL + 1))

        rng = random.Random(16)
        outcomes = []
        for i in range(20):
            kind = ("after_s", "step", "commit", "committed", "write")[i % 5]
            highest = {"step": TOTAL - 1, "commit": 6, "committed": 6, "write": 12}.get(kind)  # steps, checkpoints, files written
            kill = {"after_s": rng.uniform(first_checkpoint, duration)} if kind == "after_s" else {kind: rng.randint(1, highest)}
            ckpts = tmp_path / f"run{i}"
            killed = zygote.run(ckpts, tmp_path / f"run{i}.log", kill=kill)
            if killed == 0:  # the run finished before the kill point: nothing to resume
                outcomes.append((kill, "finished"))
                continue
            assert killed == -9, (kill, (tmp_path / f"run{i}.log").read_text()[-3000:])
            log = tmp_path / f"resume{i}.log"
            code = zygote.run(ckpts, log, resume=True)
            if code != 0:  # refused: it must say why in one line
                lines = error_lines(log)
                assert code in (1, 2) and len(lines) == 1, (kill, log.read_text()[-3000:])
                assert "no complete checkpoint" in lines[0], (kill, lines)
                outcomes.append((kill, "refused: " + lines[0]))
                continue
            weights = final_weights(ckpts)
            assert weights.keys() == expected_weights.keys()
            assert all(torch.equal(weights[k], expected_weights[k]) for k in weights), (kill, "weights differ after resume")
            assert losses(ckpts) == expected_losses, (kill, "the loss curve differs after resume")
            assert not any(p.name.startswith(".tmp-") for p in ckpts.iterdir()), (kill, sorted(p.name for p in ckpts.iterdir()))
            outcomes.append((kill, "exact"))
        print("\n".join(f"{kill}: {what}" for kill, what in outcomes))
        assert sum(what == "exact" for _, what in outcomes) >= 10, outcomes  # most kills leave a checkpoint
    finally:
        zygote.close()
