"""The compute floor of the randomwalks cases: how much of each side's training step is the
model's own forward + backward + optimizer, at exactly the bench's shapes.

    .venv/bin/python bench/walks_floor.py [--cases ilql,sft,walks-ppo] [--rounds 2] [--steps 5]
        [--trlx-python bench/.venv-trlx/bin/python] [--trlx-src DIR] [--walks-start FOLDER] [--json PATH]
        [--modes fp32-padded,fp32-packed,bf16-padded,bf16-packed]

For each case, worker processes alternate rlkit / trlX (``--rounds`` each, in rlkit's
``.venv`` with transformers 5 and in ``bench/.venv-trlx`` with transformers 4.32). A worker
builds its side's trainer exactly as the bench's worker does (``walks_rlkit.py`` /
``walks_trlx.py``, stopped where ``learn`` would start: the store and, for PPO, the first
rollouts are made), takes the first pass's real batches, and times, in rounds of ``--steps``
steps each (CPU time of the process, one thread):

- ``side step``: the side's own training step (rlkit: ``trainer.train_step``, collation
  included, then ``after_optimizer_step``, e.g. ILQL's target-Q sync; trlX: its ``learn``
  loop body: the next batch of its dataloader, ``loss``, ``accelerator.backward``,
  ``opt.step``, ``zero_grad``, ``scheduler.step``). Not included on either side: the loop's
  per-step logging and progress bar (the bench's per-run CPU s / steps has them);
- ``bare step``: a plain ``GPT2LMHeadModel`` of the same config in the same venv, forward on the
  batch's ``input_ids`` / ``attention_mask``, token cross-entropy, backward, AdamW with the
  side's optimizer settings (``fused=True`` where the side uses it: rlkit);
- ``bare, fused GELU``: the same with rlkit's one-kernel GELU (``rlkit_accelerate/kernels.py``,
  the same arithmetic to 5e-7), as rlkit runs the model;
- ``bare, fused GELU, no mask``: the same rows with an all-ones attention mask (the attention
  path a batch without padding may take);
- ``bare, fused GELU, unpadded``: the batch's real tokens only, packed into full rows of the
  padded length (``floor(real / length)`` rows, no pad): what a step would cost if no position
  were padding.
- ``bare, fused GELU, packed`` (rlkit's side): the batch's rows packed as ``train.packing``
  packs them (``rlkit_accelerate.packing.pack_rows``: bins, position ids restarting on every
  row, no mask, the LM head at the counted positions only): the floor of a packed step.
- ``matmuls only``: the bare model's linear layers' matrix products alone at the padded batch's
  token count (per layer ``x W``, ``g W^T``, ``x^T g``): a floor under any implementation of
  the same arithmetic (everything else, from layer norms to the optimizer, taken as free).

``--modes`` runs rlkit's worker once per mode, one after another (trlX's stays float32,
padded): ``packed`` sets ``train.packing: true``, ``bf16`` sets ``ACCELERATE_MIXED_PRECISION=bf16``
(CPU autocast, docs/config.md) and runs every bare variant under the same autocast.

Only full-size batches are timed (PPO's 128 rollouts make batches of 100 and 28). The table
gives min and median ms per step, each variant's share of the side's step (medians), and the
padding share of the batches. The best rlkit / trlX step ratio possible at the same
arithmetic is trlX's step over rlkit's cheapest padded bare step (``best_ratio``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from bare_step import measure, model_inputs  # noqa: E402  (beside this file, in both venvs)

CASES = ("ilql", "sft", "walks-ppo")
VARIANTS = ("side step", "bare step", "bare, fused GELU", "bare, fused GELU, no mask", "bare, fused GELU, unpadded",
            "bare, fused GELU, packed", "matmuls only")
MODES = {"fp32-padded": (False, False), "fp32-packed": (False, True), "bf16-padded": (True, False),
         "bf16-packed": (True, True)}  # rlkit's (bf16, train.packing)


class Captured(Exception):
    """Raised in place of ``learn``: carries the trainer out of ``train()`` before any step."""

    def __init__(self, trainer: Any) -> None:
        super().__init__("trainer captured before learn")
        self.trainer = trainer


# --- the workers --------------------------------------------------------------------------------


def captured_trainer(worker, trainer_class: type, spec: dict[str, Any], case: str):
    """The trainer the bench worker module ``worker`` builds for ``case`` (its ``main`` run up to
    the trainer's ``learn``, which raises :class:`Captured` instead), ready to step."""

    def capture(self, *args, **kwargs):
        raise Captured(self)

    trainer_class.learn = capture
    sys.argv = [f"{worker.__name__}.py", "--spec", spec["path"], "--out", os.devnull, "--variant", case]
    try:
        worker.main()
        raise SystemExit(f"walks_floor: {worker.__name__} returned without calling learn")
    except Captured as got:
        trainer = got.trainer
    trainer.prepare_learning()
    return trainer


def rlkit_worker(spec: dict[str, Any], case: str, rounds: int, steps: int, mode: str = "fp32-padded") -> dict[str, Any]:
    """rlkit's trainer as ``walks_rlkit.py`` builds it, captured where ``learn`` starts, in
    ``mode`` (:data:`MODES`)."""
    bf16, packing = MODES[mode]
    if bf16:  # read by the engine's Accelerator
        os.environ["ACCELERATE_MIXED_PRECISION"] = "bf16"
    if packing:  # the bench worker reads its spec from the file: a copy with the setting
        spec["walks"]["overrides"].setdefault(case, {})["train.packing"] = True
        path = Path(tempfile.mkdtemp(prefix="walks-floor-spec-")) / "spec.json"
        path.write_text(json.dumps({k: v for k, v in spec.items() if k != "path"}))
        spec = spec | {"path": str(path)}
    import transformers

    import walks_rlkit
    from rlkit_accelerate.packing import pack_rows
    from rlkit_methods.loop.trainer import RLTrainer

    trainer = captured_trainer(walks_rlkit, RLTrainer, spec, case)
    batches_ix = trainer.train_batches(0, 0)
    batches = [trainer.collate([trainer.store[i] for i in ix]) for ix in batches_ix]
    config = trainer.config
    optimizer = {"kwargs": dict(config.optimizer.kwargs)}
    fused = bool(getattr(trainer.opt, "defaults", {}).get("fused"))

    def side_step(i: int) -> None:  # the loop's step: train_step, then e.g. ILQL's target-Q sync
        trainer.train_step(batches_ix[i])
        trainer.iter_count += 1
        trainer.after_optimizer_step()

    result = measure(side_step, batches, model_config_of(config.model.model_path), optimizer, fused,
                     trainer.tokenizer.pad_token_id, rounds, steps, config.train.seed, bf16=bf16, pack_rows=pack_rows)
    # what the side step ran as, read back from the trainer
    ran = {"packing": bool(config.train.packing), "mixed_precision": str(trainer.accelerator.mixed_precision)}
    return {**result, "side": "rlkit", "mode": mode, "ran": ran, "transformers": transformers.__version__}


def trlx_worker(spec: dict[str, Any], case: str, rounds: int, steps: int) -> dict[str, Any]:
    """trlX's trainer as ``walks_trlx.py`` builds it (``trlx.train`` at the example's
    arguments), captured where ``learn`` starts; its step is ``learn``'s loop body."""
    sys.path[:0] = [str(BENCH / "standins"), spec["walks"]["trlx_src"]]
    import transformers

    import walks_trlx
    from trlx.trainer.accelerate_base_trainer import AccelerateRLTrainer

    trainer = captured_trainer(walks_trlx, AccelerateRLTrainer, spec, case)
    batches = list(trainer.create_train_dataloader())
    state = {"it": iter(())}
    rows = max(len(model_inputs(b, trainer.tokenizer.pad_token_id)[0]) for b in batches)

    def next_full_batch():  # the loader's next batch of the full size (PPO's 128 rollouts: 100 and 28)
        while True:
            batch = next(state["it"], None)
            if batch is None:
                state["it"] = iter(trainer.create_train_dataloader())
                continue
            if len(model_inputs(batch, trainer.tokenizer.pad_token_id)[0]) == rows:
                return batch

    def side_step(i: int) -> None:  # AccelerateRLTrainer.learn's body for one minibatch of one micro-batch
        batch = next_full_batch()
        loss, stats = trainer.loss(batch)
        trainer.model.train()
        trainer.accelerator.backward(loss)
        trainer.model.eval()
        trainer.opt.step()
        trainer.opt.zero_grad()
        trainer.scheduler.step()

    config = trainer.config
    result = measure(side_step, batches, model_config_of(config.model.model_path), {"kwargs": dict(config.optimizer.kwargs)}, False,
                     trainer.tokenizer.pad_token_id, rounds, steps, config.train.seed)
    return {**result, "side": "trlx", "transformers": transformers.__version__}


def model_config_of(model_path: Any) -> dict[str, Any]:
    """The model config as a dict with ``model_type``: from a config dict, or a model folder."""
    if isinstance(model_path, dict):
        return dict(model_path)
    if hasattr(model_path, "to_dict"):
        return {k: v for k, v in model_path.to_dict().items() if not k.startswith("_")}
    return json.loads((Path(model_path) / "config.json").read_text()) | {"architectures": None}


def worker_main(argv: list[str]) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--worker", choices=["rlkit", "trlx"], required=True)
    p.add_argument("--spec", required=True)
    p.add_argument("--case", choices=CASES, required=True)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--mode", choices=list(MODES), default="fp32-padded")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    spec = json.loads(Path(args.spec).read_text()) | {"path": args.spec}
    from harness import setup_torch

    setup_torch(spec)
    if args.worker == "rlkit":
        result = rlkit_worker(spec, args.case, args.rounds, args.steps, args.mode)
    else:
        result = trlx_worker(spec, args.case, args.rounds, args.steps)
    Path(args.out).write_text(json.dumps(result, indent=1, default=list) + "\n")


# --- the runner (rlkit's venv) ------------------------------------------------------------------


def floor_rows(case: str, results: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per (side, variant): min and median ms over every worker of that side, the
    bare step's share of the side's step (medians), and the padding share."""
    rows = []
    for side, runs in results.items():
        if not runs:
            continue
        variants = [v for v in VARIANTS if v in runs[0]["variants"]]  # the packed floor: rlkit's side only
        pooled = {v: [run["variants"][v] for run in runs] for v in variants}
        side_median = statistics.median(x["median_ms"] for x in pooled["side step"])
        for v in variants:
            mins = min(x["min_ms"] for x in pooled[v])
            median = statistics.median(x["median_ms"] for x in pooled[v])
            rows.append({"case": case, "side": side, "variant": v, "min_ms": mins, "median_ms": median,
                         "share_of_side_step": median / side_median if side_median else 0.0,
                         "padding_share": runs[0]["padding_share"], "transformers": runs[0]["transformers"]})
    return rows


def best_ratio(rows: list[dict[str, Any]]) -> float | None:
    """trlX's step (median) over rlkit's cheapest padded bare step (median, plain or fused
    GELU): the rlkit / trlX speed-up if rlkit's step were nothing but the bare model step."""
    get = {(r["side"], r["variant"]): r["median_ms"] for r in rows}
    trlx = get.get(("trlx", "side step"))
    bare = min((get[k] for k in get if k[0] == "rlkit" and k[1] in ("bare step", "bare, fused GELU")), default=None)
    return trlx / bare if trlx and bare else None


def side_modes(text: str, error) -> dict[str, str]:
    """``--modes`` as {side label: mode}: ``rlkit`` for fp32-padded (the label :func:`best_ratio`
    reads), ``rlkit <mode>`` for the others."""
    modes = [m.strip() for m in text.split(",") if m.strip()]
    if unknown := [m for m in modes if m not in MODES]:
        error(f"--modes: unknown {', '.join(unknown)}; choose from {', '.join(MODES)}")
    if not modes:
        error(f"--modes: name at least one of {', '.join(MODES)}")
    return {("rlkit" if m == "fp32-padded" else f"rlkit {m}"): m for m in dict.fromkeys(modes)}


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| case | side (transformers) | variant | min ms | median ms | / side step | padding |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['side']} ({r['transformers']}) | {r['variant']} | {r['min_ms']:.1f} | "
                     f"{r['median_ms']:.1f} | {r['share_of_side_step']:.2f} | {r['padding_share']:.1%} |")
    return "\n".join(lines)


def runner_main(argv: list[str]) -> int:
    import run

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default="ilql,sft,walks-ppo")
    p.add_argument("--rounds", type=int, default=2, help="rounds of --steps steps per variant in each worker")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--workers", type=int, default=2, help="worker processes per side, interleaved")
    p.add_argument("--trlx-src", default=None)
    p.add_argument("--trlx-python", default=None)
    p.add_argument("--walks-start", default=None, help="walks-ppo: an SFT export (default: train one)")
    p.add_argument("--no-peer", action="store_true", help="rlkit's side only")
    p.add_argument("--walks-set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--modes", default="fp32-padded", help=f"rlkit's modes, comma-separated: {', '.join(MODES)}")
    p.add_argument("--json", default=str(BENCH / "results" / "walks-floor.json"))
    p.add_argument("--workdir", default=None, help="where the spec, worker logs and results go (default: a new temp folder)")
    args = p.parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    if unknown := [c for c in cases if c not in CASES]:
        p.error(f"--cases: unknown {', '.join(unknown)}; choose from {', '.join(CASES)}")
    modes = side_modes(args.modes, p.error)
    # the bench's own defaults for everything its walks spec reads
    bench_args = run.parse_args(["--cases", ",".join(cases), "--threads", "1", "--device", "cpu",
                                 *(f"--walks-set={item}" for item in args.walks_set),
                                 *(["--trlx-src", args.trlx_src] if args.trlx_src else [])])
    env = run.child_env(bench_args)
    pythons = {side: sys.executable for side in modes}
    if not args.no_peer:
        pythons["trlx"], _ = run.ensure_trlx(args.trlx_python, run.trlx_source(args.trlx_src))
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="walks-floor-"))
    workdir.mkdir(parents=True, exist_ok=True)
    spec = {"device": "cpu", "dtype": "float32", "threads": 1, "seed": 0, "walks": run.walks_spec(bench_args, cases)}
    if "walks-ppo" in cases:
        start = args.walks_start or run.prepare_sft_model(workdir, env, spec["walks"]["overrides"]["sft"])
        spec["walks"]["overrides"]["walks-ppo"]["model.model_path"] = str(Path(start).resolve())
    spec_path = workdir / "spec.json"
    spec_path.write_text(json.dumps(spec))
    report: dict[str, Any] = {"command": sys.argv, "load_start": os.getloadavg(), "cases": {}}
    all_rows = []
    for case in cases:
        results: dict[str, list[dict[str, Any]]] = {side: [] for side in pythons}
        for n in range(args.workers):
            for side, python in pythons.items():
                out = workdir / f"{case}-{side.replace(' ', '-')}-{n}.json"
                worker = ["--worker", "trlx"] if side == "trlx" else ["--worker", "rlkit", "--mode", modes[side]]
                argv = [python, str(Path(__file__).resolve()), *worker, "--spec", str(spec_path), "--case", case,
                        "--rounds", str(args.rounds), "--steps", str(args.steps), "--out", str(out)]
                load = os.getloadavg()[0]
                with open(out.with_suffix(".log"), "w") as log:
                    done = subprocess.run(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=BENCH.parent)
                if done.returncode != 0 or not out.exists():
                    tail = out.with_suffix(".log").read_text(errors="replace").strip().splitlines()[-3:]
                    raise SystemExit(f"walks_floor: {case} {side} worker {n} failed: {' / '.join(tail)}")
                results[side].append(json.loads(out.read_text()) | {"load_before": load})
                print(f"  {case} {side} worker {n}: side step {results[side][-1]['variants']['side step']['median_ms']:.1f} ms "
                      f"(load {load:.2f})", file=sys.stderr)
        rows = floor_rows(case, results)
        all_rows += rows
        report["cases"][case] = {"rows": rows, "best_ratio": best_ratio(rows), "runs": results}
    report["load_end"] = os.getloadavg()
    print(table(all_rows))
    for case, entry in report["cases"].items():
        if entry["best_ratio"]:
            print(f"{case}: trlX's step / rlkit's bare model step = {entry['best_ratio']:.2f}x "
                  "(the most rlkit / trlX can reach at this arithmetic)")
    print(f"load avg {report['load_start'][0]:.2f} -> {report['load_end'][0]:.2f}; JSON: {args.json}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=1, default=list) + "\n")
    return 0


if __name__ == "__main__":
    if "--worker" in sys.argv:
        worker_main(sys.argv[1:])
    else:
        sys.exit(runner_main(sys.argv[1:]))
