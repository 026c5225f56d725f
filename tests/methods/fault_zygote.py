"""A process that imports rlkit, torch and transformers once, then runs ``rlkit run`` in a
forked child per request and SIGKILLs it where asked (test_fault_injection.py).

Forking skips the ~10 s of imports per run, so 20 killed runs and their resumes fit in a test.
The zygote itself never builds a model or an Accelerator: each child starts clean.

Requests, one JSON per line on stdin:
``{"argv": [...], "log": path, "kill": {"after_s": 1.5} | {"step": n} | {"commit": n} | {"committed": n} | {"write": n} | null}``
``step``: SIGKILL right after optimizer step n (weights moved on, its metrics not yet logged);
``commit``: SIGKILL just before the n-th checkpoint is renamed into place (all files written);
``committed``: SIGKILL just after it is renamed into place;
``write``: SIGKILL halfway through writing the n-th file with torch.save or safetensors.
Answer per request: ``@@{"rc": exit code, or -9 when killed}`` (other lines are libraries' chatter).
"""

import io
import json
import os
import signal
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot  # noqa: E402,F401
import safetensors.torch  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402,F401
import accelerate  # noqa: E402,F401

import rlkit_methods.run.checkpoint as checkpoint  # noqa: E402
from rlkit_core.cli import main  # noqa: E402
from rlkit_core.plugins import get_host  # noqa: E402

get_host().registry  # loads the plugins once
# what a run imports on its way (config checks, the model, the trainer, the data): once, here
from transformers import CONFIG_MAPPING, GPT2LMHeadModel  # noqa: E402,F401
from transformers.generation.utils import GenerationMixin  # noqa: E402,F401

CONFIG_MAPPING["gpt2"]
for _module in ("deepspeed", "rlkit_methods.config_checks", "rlkit_methods.rewards.randomwalks", "rlkit_methods.run.end_report",
                "rlkit_accelerate.trainers", "rlkit_accelerate.trainers.sft", "rlkit_methods.sft.trainer"):
    try:
        __import__(_module)
    except ImportError:
        pass


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def arm(kill: dict) -> None:
    """Install the fault in this child only."""
    if "step" in kill:
        from rlkit_methods.loop.trainer import RLTrainer

        real_after = RLTrainer.after_optimizer_step

        def after_or_die(self):
            real_after(self)
            if self.iter_count == kill["step"]:
                die()

        RLTrainer.after_optimizer_step = after_or_die
    if "commit" in kill or "committed" in kill:
        count = {"n": 0}
        real = checkpoint.commit_temporary

        def commit_or_die(final):
            count["n"] += 1
            if count["n"] == kill.get("commit"):
                die()
            done = real(final)
            if count["n"] == kill.get("committed"):
                die()
            return done

        for name in ("rlkit_accelerate.trainers.base", "rlkit_methods.loop.trainer", "rlkit_methods.run.checkpoint"):
            module = sys.modules.get(name)
            if module is None:
                try:
                    module = __import__(name, fromlist=["x"])
                except ImportError:
                    continue
            if getattr(module, "commit_temporary", None) is real:
                module.commit_temporary = commit_or_die
    if "write" in kill:
        count = {"n": 0}
        real_save, real_save_file = torch.save, safetensors.torch.save_file

        def half_then_die(data: bytes, target) -> None:
            count["n"] += 1
            if count["n"] == kill["write"]:
                with open(target, "wb") as handle:
                    handle.write(data[: len(data) // 2])
                    handle.flush()
                    os.fsync(handle.fileno())
                die()

        def save(obj, f, *args, **kwargs):
            if isinstance(f, (str, os.PathLike)):
                buffer = io.BytesIO()
                real_save(obj, buffer, *args, **kwargs)
                half_then_die(buffer.getvalue(), f)
            return real_save(obj, f, *args, **kwargs)

        def save_file(tensors, filename, *args, **kwargs):
            half_then_die(safetensors.torch.save(tensors, *args[:1], **kwargs), filename)
            return real_save_file(tensors, filename, *args, **kwargs)

        torch.save = save
        safetensors.torch.save_file = save_file


def run(request: dict) -> int:
    pid = os.fork()
    if pid == 0:  # the child: rlkit run, output to the log
        code = 1
        try:
            with open(request["log"], "w") as log:
                os.dup2(log.fileno(), 1)
                os.dup2(log.fileno(), 2)
                kill = request.get("kill") or {}
                arm(kill)
                sys.argv = ["rlkit"]
                try:
                    code = main(list(request["argv"]))
                except SystemExit as exc:  # main() exits as the rlkit command does
                    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                sys.stdout.flush()
                sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) else 1)
    after = (request.get("kill") or {}).get("after_s")
    start = time.time()
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        if after is not None and time.time() - start >= after:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return -signal.SIGKILL
        time.sleep(0.005)


if __name__ == "__main__":
    print("@@" + json.dumps({"ready": True}), flush=True)  # libraries print too: answers start with @@
    for line in sys.stdin:
        if line.strip():
            print("@@" + json.dumps({"rc": run(json.loads(line))}), flush=True)
