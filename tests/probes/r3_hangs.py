"""Round 3, hangs: sizes no run can reach, YAML that explodes when read, long phases with no
word, and a plugin thread that keeps the command alive."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from probe_bad_inputs import ROOT
from r3_code import ENV
from r3_common import PPO, SFT, check, raises, refuse, validate, write


def in_subprocess(args: list[str], expect: str, *, timeout: float = 60, memory_gb: int = 3, env=None):
    """``rlkit ARGS`` in a child limited in time and memory: one clear line, or a hang."""

    def probe():
        def limit():
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (memory_gb << 30, memory_gb << 30))

        start = time.time()
        try:
            result = subprocess.run([sys.executable, "-m", "rlkit_core", *args], env=env or ENV, capture_output=True, text=True,
                                    timeout=timeout, preexec_fn=limit, cwd=ROOT)
        except subprocess.TimeoutExpired:
            return "hang", f"still running after {timeout:.0f}s"
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        if result.returncode == 0:
            return "hang", "accepted"
        if "MemoryError" in result.stderr or result.returncode < 0:
            return "hang", f"ran out of memory ({time.time() - start:.0f}s)"
        errors = [line for line in lines if line.startswith("error:")]
        if len(errors) == 1 and expect in errors[0] and "Traceback" not in result.stderr:
            return "clear", errors[0][:200]
        return "unclear", " | ".join(lines[-3:])[:200]

    return probe


def cases(tmp: Path) -> list[tuple[str, object]]:
    probes: list[tuple[str, object]] = []

    def add(name, probe):
        probes.append((name, probe))

    # issue 32: validate said ok, then no progress line for 150 s
    for config, key, expect in [
        (PPO, "method.num_rollouts=1000000000", "method.num_rollouts"), (PPO, "method.chunk_size=100000000", "method.chunk_size"),
        (PPO, "data.eval_prompts={pipeline: randomwalks_prompts, kwargs: {repeat: 10000000}}", "repeat"),
        (PPO, "method.num_rollouts=2147483648", "method.num_rollouts"), (PPO, "method.chunk_size=2000000", "method.chunk_size"),
        (SFT, "data.eval_prompts={pipeline: randomwalks_prompts, kwargs: {repeat: 100000000}}", "repeat"),
        (PPO, "data.prompts={pipeline: randomwalks_prompts, kwargs: {repeat: 10000000}}", "repeat"),
        (PPO, "method.gen_experience_kwargs={max_new_tokens: 2, num_return_sequences: 100000000}", "num_return_sequences"),
        (SFT, "method.gen_kwargs.num_beams=100000000", "num_beams"),
    ]:
        add(f"size {key.split('=')[0]}={key.split('=', 1)[1][-12:]}", refuse(validate(config, key), expect, accepted="hang"))

    # issue 32: an alias bomb grew `rlkit config show` to 6 GB; 20,000 levels raised RecursionError
    sft = Path(SFT).read_text()
    bomb = "".join(f"b{i}: &b{i} [" + ", ".join([f"*b{i - 1}"] * 9) + "]\n" for i in range(1, 10))
    bomb_file = write(tmp / "bomb.yml", sft + "extra:\n  b0: &b0 [x]\n" + "".join("  " + line for line in bomb.splitlines(True)))
    bomb_extra = write(tmp / "bomb2.yml", sft.replace("model:\n", "model:\n  model_extra_configs:\n    b0: &b0 [x]\n"
                                                        + "".join("    " + line for line in bomb.splitlines(True)), 1))
    add("YAML alias bomb (config show)", in_subprocess(["config", "show", str(bomb_file)], ""))
    add("YAML alias bomb in model_extra_configs (config show)", in_subprocess(["config", "show", str(bomb_extra)], "alias"))
    add("YAML alias bomb (validate)", in_subprocess(["config", "validate", str(bomb_extra)], "alias"))
    deep = write(tmp / "deep.yml", sft + "extra: " + "[" * 20000 + "]" * 20000 + "\n")
    add("YAML 20,000 levels deep", in_subprocess(["config", "validate", str(deep)], "deep"))
    deep_map = write(tmp / "deepmap.yml", sft + "extra: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n")
    add("YAML 5,000 mappings deep", in_subprocess(["config", "show", str(deep_map)], "deep"))
    anchors = write(tmp / "anchors.yml", sft.replace("train:\n", "x-common: &lr 3.0e-4\ntrain:\n", 1))
    add("YAML with a plain anchor still loads", refuse(["config", "validate", str(anchors)], "unknown key", accepted="handled"))
    big = write(tmp / "big.yml", sft + "# " + "x" * (40 << 20) + "\n")
    add("a 40 MB config file", in_subprocess(["config", "validate", str(big)], "MB"))

    # issue 32: a plugin thread kept `rlkit plugins` alive forever
    def thread_plugin(args):
        folder = tmp / f"thread-{len(probes)}"
        write(folder / "spin-1.0.dist-info" / "METADATA", "Metadata-Version: 2.1\nName: spin\nVersion: 1.0\n")
        write(folder / "spin-1.0.dist-info" / "entry_points.txt", "[rlkit]\nspin = spin_plugin\n")
        write(folder / "spin_plugin.py", "import threading, time\nthreading.Thread(target=lambda: time.sleep(3600)).start()\n")
        env = dict(ENV, PYTHONPATH=ENV["PYTHONPATH"] + os.pathsep + str(folder))

        def probe():
            outcome, detail = in_subprocess(args, "", timeout=120, env=env)()
            return ("handled", detail) if outcome == "hang" and detail == "accepted" else (outcome, detail)
        return probe

    add("plugin with a non-daemon thread: rlkit plugins exits", thread_plugin(["plugins"]))
    add("plugin with a non-daemon thread: rlkit config validate exits", thread_plugin(["config", "validate", SFT]))
    add("plugin with a non-daemon thread: rlkit env exits", thread_plugin(["env"]))

    # issue 32: a reward function that took 130 s on its first call: 133 s of silence
    def heartbeat(kind):
        def probe():
            import logging

            from rlkit_methods.common.scoring import call_scorer

            seen = []
            handler = logging.Handler()
            handler.emit = lambda record: seen.append(record.getMessage())
            logger = logging.getLogger("rlkit_methods")
            logger.addHandler(handler)
            os.environ["RLKIT_HEARTBEAT_S"] = "0.5"
            try:
                call_scorer(lambda **kw: time.sleep(1.6) or [1.0], kind, 0, ["a"], ["a"], [""], {}, None)
            finally:
                logger.removeHandler(handler)
                os.environ.pop("RLKIT_HEARTBEAT_S")
            said = [m for m in seen if kind in m and "s" in m]
            return None if said else ("hang", "no word while the function ran")
        return check(probe)

    add("slow first reward call says something", heartbeat("reward"))
    add("slow metric call says something", heartbeat("metric"))
    return probes
