"""rlkit's ILQL against trlX 0.7's on the randomwalks example, number for number.

    python bench/ilql_vs_trlx.py losses [--steps 20] [--sync 5] [--out DIR]
        The example's model built by rlkit (train.seed), its initial weights, the store and
        the first STEPS batches of rlkit's data order written to DIR; rlkit's trainer takes
        STEPS optimizer steps, then trlX (in its venv) loads the same weights, tokenizes the
        same walks with its own make_experience (checked equal to rlkit's store), and takes the
        same steps with ILQLConfig.loss and torch's AdamW. Both sync the target Q heads every
        SYNC steps (trlX's loop syncs once per pass over the data: every 10 steps here). Prints
        each loss term of both sides per step.
    python bench/ilql_vs_trlx.py cross-eval MODEL... [--out DIR]
        Trained ILQL models (rlkit's hf_model folders, or trlX's with ilql_heads.* in
        pytorch_model.bin) each evaluated by both sides' own evaluate on the 1000 post-training
        prompts (bench/walks.py): which of training or evaluation makes a difference.

Options for both: ``--trlx-python`` (default bench/.venv-trlx/bin/python), ``--trlx-src``
(default $RLKIT_TRLX_SRC), ``--task-seed`` (the graph, default 1000). One thread per process.
The ``_trlx-*`` subcommands are what this script runs inside trlX's venv.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
STORE_KEYS = ("input_ids", "rewards", "states_ixs", "actions_ixs", "dones")


# --- pure helpers (both venvs) ----------------------------------------------------------------


def trlx_state(base: dict[str, Any], heads: dict[str, Any]) -> dict[str, Any]:
    """One state dict as trlX's ``AutoModelForCausalLMWithILQLHeads`` saves and loads it."""
    return {**{f"base_model.{k}": v for k, v in base.items()}, **{f"ilql_heads.{k}": v for k, v in heads.items()}}


def split_trlx_state(state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """trlX's saved state -> (the base LM's state, the ILQL heads' state)."""
    heads = {k[len("ilql_heads."):]: v for k, v in state.items() if k.startswith("ilql_heads.")}
    base = {k.removeprefix("base_model."): v for k, v in state.items() if not k.startswith("ilql_heads.")}
    return base, heads


def compare_steps(ours: list[dict[str, float]], theirs: list[dict[str, float]]) -> str:
    """A markdown table of each loss term per step, both sides and |difference|."""
    terms = [k for k in ours[0] if k in theirs[0]]
    lines = ["| step | " + " | ".join(f"{t.split('/')[-1]} rlkit / trlX / abs diff" for t in terms) + " |",
             "|" + "---|" * (len(terms) + 1)]
    for k, (a, b) in enumerate(zip(ours, theirs)):
        lines.append(f"| {k + 1} | " + " | ".join(f"{a[t]:.6f} / {b[t]:.6f} / {abs(a[t] - b[t]):.1e}" for t in terms) + " |")
    worst = max(abs(a[t] - b[t]) for a, b in zip(ours, theirs) for t in terms)
    first = max(abs(ours[0][t] - theirs[0][t]) for t in terms)
    return "\n".join(lines) + f"\n\nlargest |difference|: step 1 {first:.1e}, all steps {worst:.1e}"


def example_ilql(overrides: dict[str, Any]) -> dict[str, Any]:
    from walks import apply_overrides, example_config

    return apply_overrides(example_config("ilql"), overrides)


# --- rlkit side ---------------------------------------------------------------------------------


def rlkit_trainer(overrides: dict[str, Any], task_seed: int):
    from rlkit_core import load_config
    from rlkit_accelerate.trainers import AccelerateILQLTrainer
    from rlkit_methods.rewards.randomwalks import random_walks

    from walks import EXAMPLES, METHODS, apply_overrides, example_config, rlkit_task_overrides

    overrides = {"train.checkpoint_dir": tempfile.mkdtemp(prefix="rlkit-ilql-vs-trlx-"), **overrides}
    overrides.update(rlkit_task_overrides(apply_overrides(example_config("ilql"), overrides), task_seed))
    config = load_config(str(EXAMPLES / METHODS["ilql"]), overrides)
    task = random_walks(seed=task_seed)
    return AccelerateILQLTrainer(config, metric_fn=task.metric), config, task


def rlkit_losses(out: Path, steps: int, sync: int, task_seed: int) -> list[dict[str, float]]:
    import torch

    from rlkit_methods.loop.batching import pass_batches

    trainer, config, task = rlkit_trainer({"method.steps_for_target_q_sync": sync}, task_seed)
    trainer.make_experience([[w[:1], w[1:]] for w in task.walks], [task.optimality(w) for w in task.walks],
                            max_length=config.train.seq_length)
    model = trainer.engine.unwrapped_model
    torch.save({"base": model.base_model.state_dict(), "heads": model.ilql_heads.state_dict(),
                "config": model.base_model.config.to_dict()}, out / "init.pt")
    torch.save({k: getattr(trainer.store, k) for k in STORE_KEYS}, out / "store.pt")
    batches: list[list[int]] = []
    while len(batches) < steps:  # rlkit's data order, pass after pass
        batches += pass_batches(len(trainer.store), config.train.batch_size, seed=config.train.seed,
                                pass_index=len(batches) // max(1, trainer.steps_per_pass()))
    batches = batches[:steps]
    (out / "batches.json").write_text(json.dumps(batches))
    losses = []
    for indices in batches:
        stats = trainer.train_step(indices)
        trainer.iter_count += 1
        trainer.after_optimizer_step()
        losses.append({k: float(v) for k, v in stats.items() if k.startswith("losses/")})
    return losses


def export_model(src: str, out: Path) -> None:
    """A trained ILQL model -> ``out/rlkit`` (model.safetensors + ilql_heads.safetensors) and
    ``out/trlx`` (pytorch_model.bin with the heads, as trlX saves it)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from rlkit_accelerate.models import CausalLMWithILQLHeads

    config = AutoConfig.from_pretrained(src)
    if (Path(src) / CausalLMWithILQLHeads.heads_file).is_file():
        model = CausalLMWithILQLHeads.from_pretrained(src)
    else:
        base_state, heads_state = split_trlx_state(torch.load(Path(src) / "pytorch_model.bin", weights_only=True))
        base = AutoModelForCausalLM.from_config(config)
        base.load_state_dict(base_state)
        model = CausalLMWithILQLHeads(base)
        model.ilql_heads.load_state_dict(heads_state)
    model.save_pretrained(out / "rlkit")
    (out / "trlx").mkdir(parents=True, exist_ok=True)
    state = trlx_state(model.base_model.state_dict(), model.ilql_heads.state_dict())
    torch.save({k: v.contiguous() for k, v in state.items()}, out / "trlx" / "pytorch_model.bin")
    config.save_pretrained(out / "trlx")


def rlkit_evaluate(folder: Path, task_seed: int, seed: int) -> dict[str, float]:
    from rlkit_core.api import max_prompt_length
    from rlkit_accelerate.models.loading import load_saved_heads
    from rlkit_methods.data.prompts import PromptPipeline

    from walks import optimality_figures, post_training_prompts

    trainer, config, task = rlkit_trainer({"model.model_path": str(folder), "train.seed": seed}, task_seed)
    heads_file = type(trainer.engine.unwrapped_model).heads_file
    load_saved_heads(str(folder), {"ilql_heads": trainer.engine.unwrapped_model.ilql_heads}, heads_file)
    trainer.add_eval_pipeline(PromptPipeline(post_training_prompts(task.eval_prompts), max_prompt_length(config),
                                             trainer.tokenizer, add_special_tokens=False))
    return optimality_figures(trainer.evaluate())


# --- trlX side (runs in trlX's venv) ----------------------------------------------------------------


def trlx_imports(trlx_src: str) -> None:
    sys.path[:0] = [str(BENCH / "standins"), trlx_src]


def trlx_tokenizer(work: Path):
    import transformers

    from walks_trlx import build_tokenizer

    vocab = json.loads((work / "vocab.json").read_text())
    folder = build_tokenizer(vocab["vocab"], vocab["eos"], vocab["pad"], str(work / "tokenizer"))
    return folder, transformers.AutoTokenizer.from_pretrained(folder)


def trlx_losses(work: Path, steps: int, sync: int, task_seed: int) -> list[dict[str, float]]:
    import inspect

    import torch
    import transformers
    from examples.randomwalks import generate_random_walks
    from trlx.models.modeling_ilql import AutoModelForCausalLMWithILQLHeads, ILQLConfig
    from trlx.pipeline.offline_pipeline import ilql_collate_fn
    from trlx.trainer.accelerate_ilql_trainer import make_experience

    raw = example_ilql({})
    init = torch.load(work / "init.pt")
    config = transformers.GPT2Config(**{k: v for k, v in init["config"].items() if k != "architectures"})
    base = transformers.AutoModelForCausalLM.from_config(config)
    base.load_state_dict(init["base"])
    method = raw["method"]
    model = AutoModelForCausalLMWithILQLHeads(base, two_qs=method["two_qs"], alpha=method["alpha"])
    model.ilql_heads.load_state_dict(init["heads"])
    model.forward_kwargs = inspect.getfullargspec(model.base_model.forward).args  # what from_pretrained sets
    _, tokenizer = trlx_tokenizer(work)
    tokenizer.truncation_side = raw["tokenizer"]["truncation_side"]
    metric_fn, _, walks, _ = generate_random_walks(seed=task_seed)
    store = make_experience([[w[:1], w[1:]] for w in walks], metric_fn(walks)["optimality"], tokenizer,
                            max_length=raw["train"]["seq_length"], verbose=False)
    ours = torch.load(work / "store.pt")
    for key in STORE_KEYS:
        a, b = getattr(store, key), ours[key]
        if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
            raise SystemExit(f"ilql_vs_trlx: trlX's make_experience differs from rlkit's store in {key} (shapes)")
        diff = max(float((x.double() - y.double()).abs().max()) for x, y in zip(a, b))
        if diff > 1e-6:
            raise SystemExit(f"ilql_vs_trlx: trlX's make_experience differs from rlkit's store in {key} (by {diff:.1e})")
        print(f"trlX's make_experience, {key}: rlkit's store to {diff:.1e}", file=sys.stderr)
    ilql = ILQLConfig(name="ILQLConfig", tau=method["tau"], gamma=method["gamma"], cql_scale=method["cql_scale"],
                      awac_scale=method["awac_scale"], alpha=method["alpha"], beta=method["beta"],
                      steps_for_target_q_sync=sync, two_qs=method["two_qs"], gen_kwargs={})
    opt_kwargs = raw["optimizer"]["kwargs"]
    opt = torch.optim.AdamW(model.parameters(), lr=opt_kwargs["lr"], betas=tuple(opt_kwargs["betas"]),
                            eps=opt_kwargs["eps"], weight_decay=opt_kwargs["weight_decay"])
    model.eval()  # trlX's loop: forward in eval mode (dropout is 0 in the example)
    losses = []
    for k, indices in enumerate(json.loads((work / "batches.json").read_text())[:steps]):
        batch = ilql_collate_fn([store[i] for i in indices])
        logits, qs, target_qs, vs, _ = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                                             actions_ixs=batch.actions_ixs, states_ixs=batch.states_ixs)
        loss, stats = ilql.loss((logits, (qs, target_qs, vs)), batch)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if (k + 1) % sync == 0:
            model.sync_target_q_heads()
        losses.append({key: float(v) for key, v in stats.items() if key.startswith("losses/")})
    return losses


def trlx_evaluate(work: Path, folder: Path, task_seed: int, seed: int) -> dict[str, float]:
    from examples.randomwalks import generate_random_walks
    from trlx.data.configs import TRLConfig
    from trlx.utils import set_seed
    from trlx.utils.loading import get_pipeline, get_trainer

    from walks import optimality_figures, post_training_prompts, trlx_config
    from walks_trlx import section_fields

    raw = example_ilql({"train.checkpoint_dir": str(work / "trlx-ckpts"), "train.seed": seed})
    tokenizer_folder, _ = trlx_tokenizer(work)
    config_dict, _ = trlx_config(raw, section_fields(raw["method"]["name"]), tokenizer_folder)
    config_dict["model"]["model_path"] = str(folder)
    config = TRLConfig.from_dict(config_dict)
    metric_fn, start_letters, _, _ = generate_random_walks(seed=task_seed)
    trainer = get_trainer(config.train.trainer)(config=config, metric_fn=lambda samples, **kw: metric_fn(samples),
                                                stop_sequences=["|"])  # as trlX's example and bench/walks_trlx.py
    prompt_length = config.train.seq_length - config.method.gen_kwargs["max_new_tokens"]
    pipeline = get_pipeline(config.train.pipeline)(post_training_prompts(start_letters), prompt_length, trainer.tokenizer,
                                                   add_special_tokens=False)
    trainer.add_eval_pipeline(pipeline)
    trainer.eval_dataloader = trainer.accelerator.prepare_data_loader(pipeline.create_loader(config.train.batch_size))
    set_seed(seed)  # trlX's evaluate draws from the global generator: the same draws for every model
    return optimality_figures(trainer.evaluate())


# --- driver ------------------------------------------------------------------------------------------


def in_trlx(args: argparse.Namespace, *argv: str) -> None:
    from trlx_peer import trlx_source

    python = args.trlx_python or str(BENCH / ".venv-trlx" / "bin" / "python")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(BENCH)}
    subprocess.run([python, __file__, *argv, "--trlx-src", str(trlx_source(args.trlx_src)), "--task-seed", str(args.task_seed)],
                   env=env, check=True)


def write_vocab(work: Path) -> None:
    from rlkit_methods.data.tokenizers import RANDOMWALKS_EOS, RANDOMWALKS_PAD, randomwalks_vocab

    (work / "vocab.json").write_text(json.dumps({"vocab": randomwalks_vocab(), "eos": RANDOMWALKS_EOS, "pad": RANDOMWALKS_PAD}))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("command", choices=["losses", "cross-eval", "_trlx-losses", "_trlx-eval"])
    p.add_argument("models", nargs="*", help="cross-eval: trained model folders (rlkit's or trlX's hf_model)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--sync", type=int, default=5, help="target-Q sync every N optimizer steps, both sides")
    p.add_argument("--seed", type=int, default=1000, help="cross-eval: train.seed of the evaluating trainers")
    p.add_argument("--task-seed", type=int, default=1000)
    p.add_argument("--out", default=None, help="working folder (default: a new temporary one)")
    p.add_argument("--trlx-python", default=None)
    p.add_argument("--trlx-src", default=None)
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    work = Path(args.out or tempfile.mkdtemp(prefix="ilql-vs-trlx-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.command.startswith("_trlx"):
        trlx_imports(args.trlx_src)
        if args.command == "_trlx-losses":
            (work / "trlx_losses.json").write_text(json.dumps(trlx_losses(work, args.steps, args.sync, args.task_seed)))
        else:
            for i, _ in enumerate(args.models):
                figures = trlx_evaluate(work, work / f"model-{i}" / "trlx", args.task_seed, args.seed)
                (work / f"model-{i}" / "trlx_eval.json").write_text(json.dumps(figures))
        return 0
    write_vocab(work)
    if args.command == "losses":
        ours = rlkit_losses(work, args.steps, args.sync, args.task_seed)
        in_trlx(args, "_trlx-losses", "--out", str(work), "--steps", str(args.steps), "--sync", str(args.sync))
        print(compare_steps(ours, json.loads((work / "trlx_losses.json").read_text())))
        return 0
    if not args.models:
        raise SystemExit("ilql_vs_trlx: cross-eval needs at least one model folder")
    rows = []
    for i, model in enumerate(args.models):
        export_model(model, work / f"model-{i}")
        rows.append(rlkit_evaluate(work / f"model-{i}" / "rlkit", args.task_seed, args.seed))
    in_trlx(args, "_trlx-eval", *args.models, "--out", str(work), "--seed", str(args.seed))
    print("| model | rlkit's evaluate | trlX's evaluate |\n|---|---|---|")
    for i, model in enumerate(args.models):
        theirs = json.loads((work / f"model-{i}" / "trlx_eval.json").read_text())
        fmt = lambda f: " / ".join(f"{f[k]:.3f}" for k in sorted(f, key=lambda k: float(k.rpartition("=")[2])))  # noqa: E731
        print(f"| {model} | {fmt(rows[i])} | {fmt(theirs)} |")
    print("\n(optimality at each beta of gen_kwargs, 1000 samples each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
