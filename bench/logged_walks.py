"""logged_pg on randomwalks rows logged from the SFT model, with and without the behaviour
policy's log-probs: does it raise optimality above the SFT model's?

    python bench/logged_walks.py [--sft-steps 300] [--per-prompt 16] [--steps 40] [--out DIR]

1. SFT from scratch with examples/randomwalks/sft_randomwalks.yml (``--sft-steps``).
2. The SFT model samples ``--per-prompt`` walks from each of the 20 start letters (the config's
   sampling settings); each row's reward is its optimality, and its behaviour log-probs are
   the SFT model's log-probs of the completion's tokens (EOS included), from the engine's
   ``response`` forward on the rows as logged_pg tokenizes them.
3. logged_pg from the SFT model on those rows, ``--steps`` steps, once without and once with
   the behaviour log-probs (same seed, same rows).
4. Each model samples the 20 start letters 50 times (1000 walks, seed 0): mean optimality.

One run, one process, OMP_NUM_THREADS=1; no timings are claimed (this machine is shared).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPEATS = 50


def reset() -> None:
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()


def sample(trainer, prompts: list[str], seed: int) -> list[str]:
    """One sampled walk (prompt + output) per prompt, batches of 100."""
    import torch

    tokenizer, texts = trainer.tokenizer, []
    torch.manual_seed(seed)
    for i in range(0, len(prompts), 100):
        batch = tokenizer(prompts[i : i + 100], return_tensors="pt", padding=True, add_special_tokens=False)
        out = trainer.generate(batch["input_ids"], batch["attention_mask"])
        texts += tokenizer.batch_decode(out, skip_special_tokens=True)
    return texts


def mean_optimality(trainer, task) -> float:
    values = task.metric(sample(trainer, task.eval_prompts * REPEATS, seed=0))["optimality"]
    return sum(values) / len(values)


def logged_rows(trainer, task, per_prompt: int):
    """Rows sampled by the SFT model, their optimality, and its log-probs of their tokens."""
    from rlkit_methods.logged.store import make_logged_store

    walks = sample(trainer, [p for p in task.eval_prompts for _ in range(per_prompt)], seed=1)
    rows = [[w[:1], w[1:]] for w in walks if len(w) > 1]
    rewards = task.metric(["".join(r) for r in rows])["optimality"]
    store, _ = make_logged_store(rows, rewards, trainer.tokenizer, trainer.config.train.seq_length)
    behaviour = []
    for i in range(0, len(store), 100):
        items = store.items[i : i + 100]
        batch = store.collate(items)
        logprobs = trainer.engine.forward("response", batch)["logprobs"]
        behaviour += [lp[: len(it["completion"])].tolist() for lp, it in zip(logprobs, items)]
    with_behaviour = [{"prompt": p, "completion": c, "behaviour_logprobs": b} for (p, c), b in zip(rows, behaviour)]
    return rows, with_behaviour, rewards


def logged_pg(sft_model: str, work: Path, name: str, samples, rewards, steps: int, task):
    import rlkit_core as rlkit
    from rlkit_methods.logged.config import LoggedPGConfig

    sets = [f"model.model_path={sft_model}", f"train.total_steps={steps}", f"train.checkpoint_dir={work / name}",
            f"train.eval_interval={steps}", f"train.checkpoint_interval={steps}", "train.trainer=AccelerateLoggedPGTrainer"]
    config = rlkit.load_config(ROOT / "examples" / "randomwalks" / "sft_randomwalks.yml", sets)
    config.method = LoggedPGConfig(gen_kwargs=dict(config.method.gen_kwargs))
    trainer = rlkit.train(config=config, samples=samples, rewards=rewards, eval_prompts=task.eval_prompts, metric_fn=task.metric)
    try:
        records = [json.loads(line) for line in (work / name / "logs" / "metrics.jsonl").read_text().splitlines()]
        weights = [r.get("policy/importance_weight_mean") for r in records if r["kind"] == "train"]
        return mean_optimality(trainer, task), weights
    finally:
        reset()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sft-steps", type=int, default=300)
    parser.add_argument("--per-prompt", type=int, default=16)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    work = Path(args.out or tempfile.mkdtemp(prefix="logged-walks-"))

    import rlkit_core as rlkit
    from rlkit_methods.rewards.randomwalks import random_walks

    task = random_walks(seed=1000)
    sets = [f"train.total_steps={args.sft_steps}", f"train.checkpoint_dir={work / 'sft'}",
            f"train.eval_interval={args.sft_steps}", f"train.checkpoint_interval={args.sft_steps}"]
    sft = rlkit.train_from_config(rlkit.load_config(ROOT / "examples" / "randomwalks" / "sft_randomwalks.yml", sets))
    sft_model = work / "sft_model"
    sft.save_pretrained(sft_model)
    result = {"sft": mean_optimality(sft, task)}
    rows, with_behaviour, rewards = logged_rows(sft, task, args.per_prompt)
    reset()
    result["logged_rows"] = len(rows)
    result["logged_mean_optimality"] = sum(rewards) / len(rewards)
    result["logged_pg"], _ = logged_pg(str(sft_model), work, "plain", rows, rewards, args.steps, task)
    result["logged_pg_behaviour"], weights = logged_pg(str(sft_model), work, "behaviour", with_behaviour, rewards, args.steps, task)
    result["importance_weight_mean_first_last"] = [weights[0], weights[-1]]
    (work / "result.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
