"""Bench worker: one rlkit PPO step (rollouts, then ``ppo_epochs`` passes) through the
trainer API, with every phase timed.

    python bench/ppo_rlkit.py --spec spec.json --out result.json --variant k2|all

``make_experience`` and ``learn`` are the trainer's own; the bench only wraps methods to
time them (generate, reward, trunk / top / reference forwards, backward, optimizer step) and
turns checkpoint writing off (``learn`` saves at its last step; that is disk, not PPO).
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

from harness import PhaseTimer, cuda_peak_bytes, grad_phase, read_spec, rollout_then_learn, setup_torch, worker_args, write_result

VARIANTS = {"k2": 2, "all": -1}  # model.num_layers_unfrozen


def ppo_config(spec: dict, num_layers_unfrozen: int, workdir: str):
    from rlkit_methods import default_ppo_config

    s = spec["ppo"]
    extra = {} if spec["dtype"] == "float32" else {"dtype": spec["dtype"]}
    config = default_ppo_config().evolve(
        train=dict(seq_length=s["seq_length"], batch_size=s["batch_size"], epochs=100, total_steps=s["ppo_epochs"],
                   checkpoint_interval=10**9, eval_interval=10**9, checkpoint_dir=workdir, save_best=False,
                   seed=spec["seed"], tracker=None),
        model=dict(model_path=spec["model"], num_layers_unfrozen=num_layers_unfrozen, model_extra_configs=extra),
        tokenizer=dict(tokenizer_path=spec["model"], padding_side="left"),
        optimizer=dict(kwargs=dict(lr=s["lr"], betas=[0.9, 0.999], eps=1e-8, weight_decay=0.0)),
        method=dict(num_rollouts=s["batch_size"], chunk_size=s["batch_size"], ppo_epochs=s["ppo_epochs"],
                    init_kl_coef=s["kl_coef"], target=None, vf_coef=s["vf_coef"], scale_reward="ignored",
                    gen_kwargs=dict(max_new_tokens=s["new_tokens"], min_new_tokens=s["new_tokens"],
                                    top_k=0, top_p=1.0, do_sample=True)),
    )
    if spec.get("rlkit_set"):  # run.py --rlkit-set KEY=VALUE: measure a config change, same parsing as --set
        from rlkit_core.config.overrides import apply_sets

        config = type(config).from_dict(apply_sets(config.to_dict(), spec["rlkit_set"]))
    return config


def distinct_words(samples, prompts, outputs, **_) -> list[float]:
    """The bench's reward: cheap, deterministic, no model (TRL's side must use a reward model)."""
    return [len(set(o.split())) / 32.0 for o in outputs]


def build_trainer(spec: dict, num_layers_unfrozen: int, workdir: str):
    """The PPO trainer on the spec's model and prompts, as ``rlkit_core.train`` would make it."""
    from rlkit_accelerate.trainers import AcceleratePPOTrainer
    from rlkit_core.api import max_prompt_length
    from rlkit_methods.data.prompts import PromptPipeline

    config = ppo_config(spec, num_layers_unfrozen, workdir)
    trainer = AcceleratePPOTrainer(config=config, reward_fn=distinct_words)
    trainer.add_prompt_pipeline(PromptPipeline(spec["prompts"], max_prompt_length(config), trainer.tokenizer))
    return trainer


@contextlib.contextmanager
def operator_profile(spec: dict, out: str):
    """With ``spec["profile"]`` (``run.py --profile``): torch.profiler over the step, the
    operators by self time written beside the result (``<out>.ops.txt``). It slows the step:
    use it to see where a phase's time goes, not for the table."""
    if not spec.get("profile"):
        yield None
        return
    import torch

    activities = [torch.profiler.ProfilerActivity.CPU]
    if spec["device"] == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities, record_shapes=False) as prof:
        yield prof
    sort = "self_cuda_time_total" if spec["device"] == "cuda" else "self_cpu_time_total"
    Path(out).with_suffix(".ops.txt").write_text(prof.key_averages().table(sort_by=sort, row_limit=30) + "\n")


def main() -> None:
    args = worker_args(__doc__.splitlines()[0])
    if args.variant not in VARIANTS:
        raise SystemExit(f"ppo_rlkit: --variant must be one of {', '.join(VARIANTS)}, got {args.variant!r}")
    spec = read_spec(args.spec)
    torch, _, _ = setup_torch(spec)
    timer = PhaseTimer(spec["device"])
    workdir = tempfile.mkdtemp(prefix="rlkit-bench-")
    with timer.section("load"):
        from rlkit_methods.run.metrics_log import read_metrics

        trainer = build_trainer(spec, VARIANTS[args.variant], workdir)

    model = trainer.unwrapped_model
    timer.wrap(trainer, "sample_rollouts", "rollout/generate")  # the generator, as the rollouts call it
    timer.wrap(trainer, "score_samples", "rollout/reward")
    timer.wrap(model, "forward_trunk", grad_phase("rollout/trunk", "train/trunk forward"))
    timer.wrap(model, "forward_top", grad_phase("rollout/top+value", "train/top+value forward"))
    timer.wrap(model, "forward_reference", "rollout/reference")
    timer.wrap(trainer.accelerator, "backward", "train/backward")
    timer.wrap(trainer.opt, "step", "train/optimizer")
    trainer.save = lambda *a, **k: None  # learn() checkpoints at its last step: disk, not PPO

    with operator_profile(spec, args.out) as profiled:
        peaks = rollout_then_learn(timer, lambda: trainer.make_experience(spec["ppo"]["batch_size"]), trainer.learn)

    records = read_metrics(trainer.logging_dir)
    train = [r for r in records if r["kind"] == "train"]
    rollout = next(r for r in records if r["kind"] == "rollout")
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    write_result(args.out, {
        **timer.step_summary(),
        "peak_rss_after": peaks,
        "optimizer_steps": len(train),
        "trainable_params": trainable,
        "trainer_metrics": {  # the trainer's own timers, as a cross-check of the wrapped ones
            **{k: v for k, v in rollout.items() if k.startswith(("time/", "tokens_per_second/"))},
            "time/forward (sum)": sum(r["time/forward"] for r in train),
            "time/backward (sum)": sum(r["time/backward"] for r in train),
            "losses/total_loss first, last": [train[0]["losses/total_loss"], train[-1]["losses/total_loss"]],
        },
        "cuda_peak_bytes": cuda_peak_bytes(spec["device"]),
        "torch": torch.__version__,
    })


if __name__ == "__main__":
    main()
