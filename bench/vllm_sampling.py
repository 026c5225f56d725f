"""Sampling tokens/s: the vLLM generator (rlkit-vllm) against the engine's own sampler, both
through rlkit's code (``trainer.sample``) on the same trainer, interleaved round by round, same
threads, in one process per dtype. Runs in the vLLM venv:

    OMP_NUM_THREADS=1 .venv-vllm/bin/python bench/vllm_sampling.py [--dtypes float32,bfloat16] [--rounds 3] \
        [--shapes 32x1x16,8x4x16,32x8x64] [--model smollm2-135m] [--out figures.json] [--floor] \
        [--vllm-kwargs '{"enforce_eager": false}']

A shape is prompts x samples per prompt x new tokens, one ``trainer.sample`` call (every row
samples exactly that many: ``min_new_tokens``; a prompt's samples are adjacent rows, as the
online trainers lay them out). The defaults are the calls the examples make: the main job
(examples/sentiments/ppo_smollm2.yml: ``chunk_size`` 32 prompts, 16 tokens) 32x1x16, the GRPO
example (grpo_smollm2.yml: ``chunk_size`` 32 rows = 8 prompts x groups of 4, 16 tokens) 8x4x16,
and the issue's 32x8x64. Each dtype runs in its own process (a trainer and a vLLM engine of
that dtype); both sides of a shape alternate within it, after one untimed call each at the shape's batch
(``WARM_UP_TOKENS`` new tokens).

Each call is timed in wall seconds and in the process's CPU seconds (``time.process_time``:
every thread, vLLM's included, since it runs in this process): on a shared machine the wall
figure measures the neighbours, the CPU figure much less so. Medians of the rounds, with
their spread (min-max) and the load average. ``--floor`` adds each shape's compute floor
(bench/sampling_floor.py: the call's matrix products alone, same weights and dtype) and the
most any sampler on those kernels could gain over the engine's (floor / engine).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

PROMPTS = ["The movie was", "I watched this film last night and", "Honestly, the acting", "This is the worst",
           "A beautiful story about", "The director clearly", "I did not expect", "What a waste of",
           "My favourite scene is", "The plot twists", "Two hours of", "The soundtrack alone",
           "It starts slowly but", "Nobody in the cinema", "The sequel is", "Every character"]
SHAPES = "32x1x16,8x4x16,32x8x64"
NAMES = {"32x1x16": "main job", "8x4x16": "GRPO example", "32x8x64": "issue 27"}
SIDES = ("engine", "vllm")
WARM_UP_TOKENS = 8


def build_trainer(model: str, dtype: str, workdir: str):
    """A GRPO trainer on the accelerate engine, as ``rlkit_core.train`` would make it."""
    from rlkit_core.plugins import get_registry
    from rlkit_core.registry import load_target
    from rlkit_methods.grpo.config import default_grpo_config

    extra = {} if dtype == "float32" else {"dtype": dtype}
    config = default_grpo_config().evolve(
        train=dict(seq_length=128, batch_size=8, total_steps=1, checkpoint_dir=workdir, tracker=None, seed=0),
        model=dict(model_path=model, num_layers_unfrozen=-1, model_extra_configs=extra),
        tokenizer=dict(tokenizer_path=model, padding_side="left"),
    )
    cls = load_target(get_registry().get("trainer", "AccelerateGRPOTrainer").target)
    return cls(config=config, reward_fn=lambda samples, **_: [0.0] * len(samples))


def timed(trainer, batch, new_tokens: int) -> tuple[float, float]:
    """(tokens per wall second, tokens per CPU second) of one ``trainer.sample`` call."""
    kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, top_k=0, top_p=1.0, do_sample=True)
    wall, cpu = time.perf_counter(), time.process_time()
    samples = trainer.sample(batch["input_ids"], batch["attention_mask"], **kwargs)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert samples.ids.shape[1] - batch["input_ids"].shape[1] == new_tokens, samples.ids.shape
    tokens = batch["input_ids"].shape[0] * new_tokens
    return tokens / wall, tokens / cpu


def parse_shape(shape: str) -> tuple[int, int, int]:
    try:
        prompts, group, new_tokens = (int(x) for x in shape.split("x"))
    except ValueError:
        raise SystemExit(f"bench: --shapes takes PROMPTSxSAMPLESxTOKENS, e.g. 8x4x16; got {shape!r}") from None
    return prompts, group, new_tokens


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def measure(args: argparse.Namespace, dtype: str) -> list[dict]:
    """Every shape at one dtype, in this process."""
    import torch

    from rlkit_vllm.generator import VLLMGenerator

    torch.manual_seed(0)
    trainer = build_trainer(args.model, dtype, tempfile.mkdtemp(prefix="rlkit-vllm-bench-"))
    generators = {"engine": trainer.generator,
                  "vllm": VLLMGenerator(trainer.engine, dtype=dtype, kv_cache_mb=args.kv_cache_mb,
                                        **json.loads(args.vllm_kwargs))}
    rows = []
    for shape in args.shapes.split(","):
        prompts, group, new_tokens = parse_shape(shape)
        texts = (PROMPTS * (prompts // len(PROMPTS) + 1))[:prompts]
        batch = trainer.tokenizer([t for t in texts for _ in range(group)], return_tensors="pt", padding=True)
        figures = {side: {"wall": [], "cpu": []} for side in SIDES}
        load = [os.getloadavg()[0]]
        for side in SIDES:  # warm-up at the shape's batch, untimed (a few tokens: the batch-size-dependent set-up)
            trainer.generator = generators[side]
            timed(trainer, batch, min(new_tokens, WARM_UP_TOKENS))
        for _ in range(args.rounds):
            for side in SIDES:
                trainer.generator = generators[side]
                wall, cpu = timed(trainer, batch, new_tokens)
                figures[side]["wall"].append(wall)
                figures[side]["cpu"].append(cpu)
        load.append(os.getloadavg()[0])
        row = dict(shape=shape, name=NAMES.get(shape, ""), dtype=dtype, rounds=args.rounds, load_average=load,
                   prompt_lengths=[int(n) for n in batch["attention_mask"][::group].sum(dim=1)],  # the distinct prompts
                   threads=torch.get_num_threads(),
                   **{f"{side}_{clock}": spread(figures[side][clock]) for side in SIDES for clock in ("wall", "cpu")},
                   raw=figures)
        for clock in ("wall", "cpu"):  # the ratio of medians and each round's own ratio
            ratios = [v / e for v, e in zip(figures["vllm"][clock], figures["engine"][clock])]
            row[f"ratio_{clock}"] = {"of_medians": row[f"vllm_{clock}"]["median"] / row[f"engine_{clock}"]["median"],
                                     **{k: v for k, v in spread(ratios).items() if k != "median"}}
        rows.append(row)
        print(line(row), flush=True)
    generators["vllm"].close()
    return rows


def add_floor(rows: list[dict], model: str, dtype: str) -> None:
    """Each row's compute floor (bench/sampling_floor.py) with the same weights, in this process."""
    import torch
    from transformers import AutoModelForCausalLM

    from rlkit_accelerate.assets import resolve
    from sampling_floor import floor_seconds, linear_weights

    weights = linear_weights(AutoModelForCausalLM.from_pretrained(str(resolve(model)), dtype=getattr(torch, dtype)))
    for row in rows:
        prompts, group, new_tokens = parse_shape(row["shape"])
        floor = floor_seconds(weights, row["prompt_lengths"], group, new_tokens)
        row["floor_cpu"] = prompts * group * new_tokens / floor["total_s"]  # tokens per CPU second
        # what the floor leaves any sampler on these kernels: at most this many times the engine
        row["engine_bound"] = row["floor_cpu"] / row["engine_cpu"]["median"]
        print(f"{row['shape']:>8} {dtype:>8}  floor {row['floor_cpu']:.1f} CPU tok/s: engine at "
              f"{row['engine_cpu']['median'] / row['floor_cpu']:.2f} of it, vLLM at {row['vllm_cpu']['median'] / row['floor_cpu']:.2f}",
              flush=True)


def line(row: dict) -> str:
    def fig(side, clock):
        s = row[f"{side}_{clock}"]
        return f"{s['median']:6.1f} ({s['min']:.1f}-{s['max']:.1f})"

    return (f"{row['shape']:>8} {row['dtype']:>8}  wall tok/s: engine {fig('engine', 'wall')} vllm {fig('vllm', 'wall')} "
            f"x{row['ratio_wall']['of_medians']:.2f}  |  CPU tok/s: engine {fig('engine', 'cpu')} vllm {fig('vllm', 'cpu')} "
            f"x{row['ratio_cpu']['of_medians']:.2f} ({row['ratio_cpu']['min']:.2f}-{row['ratio_cpu']['max']:.2f})  "
            f"[{row['rounds']} rounds, load {row['load_average'][0]:.2f}->{row['load_average'][1]:.2f}, "
            f"{row['threads']} thread(s)]"
            + (f"  floor {row['floor_cpu']:.1f} CPU tok/s (any sampler <= x{row['engine_bound']:.2f} the engine)"
               if "floor_cpu" in row else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated; one process each")
    parser.add_argument("--shapes", default=SHAPES)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kv-cache-mb", type=int, default=1024)
    parser.add_argument("--vllm-kwargs", default="{}", help='JSON: more vLLM generator settings, e.g. {"enforce_eager": false}')
    parser.add_argument("--floor", action="store_true", help="also time each shape's compute floor (bench/sampling_floor.py)")
    parser.add_argument("--out", default=None, help="write the figures as JSON here")
    parser.add_argument("--one-dtype", default=None, help=argparse.SUPPRESS)  # a child process's dtype
    args = parser.parse_args()
    for shape in args.shapes.split(","):
        parse_shape(shape)
    if args.one_dtype:
        rows = measure(args, args.one_dtype)
        if args.floor:
            add_floor(rows, args.model, args.one_dtype)
        with open(args.out, "w") as f:
            json.dump(rows, f)
        return
    rows = []
    for dtype in args.dtypes.split(","):
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            argv = [sys.executable, __file__, "--one-dtype", dtype, "--model", args.model, "--shapes", args.shapes,
                    "--rounds", str(args.rounds), "--kv-cache-mb", str(args.kv_cache_mb), "--vllm-kwargs", args.vllm_kwargs, "--out", out.name] + ["--floor"] * args.floor
            subprocess.run(argv, check=True)
            rows += json.load(open(out.name))
    print(f"\nOMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, load average now {os.getloadavg()[0]:.2f}")
    for row in rows:
        print(line(row))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
