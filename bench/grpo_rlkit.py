"""Bench worker: one rlkit GRPO or RLOO step (one rollout phase of prompts x num_generations
samples, then one optimizer step over all of them) through the trainer API, every phase timed.

    python bench/grpo_rlkit.py --spec spec.json --out result.json --variant grpo-k2|grpo-all|rloo-k2|rloo-all

(``grpo-k2vllm``, ``grpo-allvllm``: the same with ``train.generator: vllm``, in the vLLM venv.)

The trainer is the one ``rlkit_core.train`` would build for ``train.trainer:
AccelerateGRPOTrainer`` (or ``AccelerateRLOOTrainer``), resolved through the plugin registry;
``make_experience`` and ``learn`` are its own. The bench only wraps methods to time them
(generate, reward, the no-grad rollout forward with the reference, the training forward,
backward, optimizer step) and turns checkpoint writing off (``learn`` saves at its last step).
"""

from __future__ import annotations

import tempfile

from grpo_common import completions_per_step, distinct_words, split_variant
from harness import PhaseTimer, cuda_peak_bytes, grad_phase, read_spec, rollout_then_learn, setup_torch, worker_args, write_result

UNFROZEN = {"k2": 2, "all": -1}  # model.num_layers_unfrozen
VLLM = {"k2vllm": 2, "allvllm": -1}  # the same with train.generator: vllm (the runner's interpreter has vLLM)


def grpo_config(spec: dict, method: str, num_layers_unfrozen: int, workdir: str, generator: str | None = None):
    """The case's settings as an rlkit config (TRL's field names in ``method``); ``generator``:
    ``train.generator`` (None: the engine's sampler)."""
    from rlkit_methods import default_grpo_config, default_rloo_config

    g = spec["grpo"]
    rows = completions_per_step(g)
    extra = {} if spec["dtype"] == "float32" else {"dtype": spec["dtype"]}
    method_fields = dict(
        num_generations=g["num_generations"], beta=g["beta"], epsilon=g["epsilon"], epsilon_high=g["epsilon_high"],
        num_iterations=1, num_rollouts=rows, chunk_size=rows,
        gen_kwargs=dict(max_new_tokens=g["new_tokens"], min_new_tokens=g["new_tokens"], top_k=0, top_p=1.0,
                        temperature=1.0, do_sample=True),
    )
    if method == "grpo":
        method_fields.update(loss_type=g["loss_type"], scale_rewards=g["scale_rewards"])
    base = default_grpo_config() if method == "grpo" else default_rloo_config()
    config = base.evolve(
        train=dict(seq_length=64 + g["new_tokens"], batch_size=rows, minibatch_size=None, epochs=1, total_steps=1,
                   checkpoint_interval=10**9, eval_interval=10**9, checkpoint_dir=workdir, save_best=False,
                   seed=spec["seed"], tracker=None, max_grad_norm=g["max_grad_norm"], generator=generator),
        model=dict(model_path=spec["model"], num_layers_unfrozen=num_layers_unfrozen, model_extra_configs=extra),
        tokenizer=dict(tokenizer_path=spec["model"], padding_side="left"),
        optimizer=dict(kwargs=dict(lr=g["lr"], betas=[0.9, 0.999], eps=1e-8, weight_decay=0.0)),
        method=method_fields,
    )
    if spec.get("rlkit_set"):  # run.py --rlkit-set KEY=VALUE: measure a config change, same parsing as --set
        from rlkit_core.config.overrides import apply_sets

        config = type(config).from_dict(apply_sets(config.to_dict(), spec["rlkit_set"]))
    return config


def build_trainer(spec: dict, method: str, num_layers_unfrozen: int, workdir: str, generator: str | None = None):
    """The trainer ``rlkit_core.train`` would build for this config, with the case's prompts."""
    from rlkit_core.api import max_prompt_length, resolve_trainer
    from rlkit_core.plugins import get_host
    from rlkit_core.registry import load_target
    from rlkit_methods.data.prompts import PromptPipeline

    config = grpo_config(spec, method, num_layers_unfrozen, workdir, generator)
    new_tokens = spec["grpo"]["new_tokens"]

    def distinct_words_reward(samples, prompts, outputs, **_) -> list[float]:
        return distinct_words(outputs, new_tokens)

    registry = get_host().registry
    trainer_cls = load_target(resolve_trainer(config, registry.get("method", config.method.name), registry).target, what="trainer")
    trainer = trainer_cls(config=config, reward_fn=distinct_words_reward)
    trainer.add_prompt_pipeline(PromptPipeline(spec["grpo"]["prompts"], max_prompt_length(config), trainer.tokenizer))
    return trainer


def main() -> None:
    args = worker_args(__doc__.splitlines()[0])
    method, unfrozen = split_variant(args.variant, {**UNFROZEN, **VLLM})
    generator = "vllm" if args.variant.partition("-")[2] in VLLM else None
    spec = read_spec(args.spec)
    torch, _, _ = setup_torch(spec)
    timer = PhaseTimer(spec["device"])
    workdir = tempfile.mkdtemp(prefix="rlkit-bench-")
    with timer.section("load"):
        from rlkit_methods.run.metrics_log import read_metrics

        trainer = build_trainer(spec, method, unfrozen, workdir, generator)

    engine = trainer.engine
    model = engine.unwrapped_model
    timer.wrap(trainer, "sample_rollouts", "rollout/generate")  # the generator, as the rollouts call it
    timer.wrap(trainer, "score_samples", "rollout/reward")
    timer.wrap(engine, "forward", "rollout/forward (other)")  # the no-grad rollout forward, beyond the parts below
    for name, rollout, train in (("forward_trunk", "rollout/trunk", "train/trunk forward"),
                                 ("forward_top", "rollout/policy top", "train/top forward"),
                                 ("forward_reference", "rollout/reference", "train/reference (unexpected)")):
        if hasattr(model, name):  # the hydra model's parts; a plain LM has none of them
            timer.wrap(model, name, grad_phase(rollout, train))
    if hasattr(model, "shares_prompts"):  # unfrozen=-1: the policy and reference passes
        import rlkit_accelerate.models.policy as policy_module

        timer.wrap(policy_module, "response_logits_sharing_prompts",
                   grad_phase("rollout/shared-prompt passes", "train/forward (shared prompts)"))
    timer.wrap(engine.accelerator, "backward", "train/backward")
    timer.wrap(engine.opt, "step", "train/optimizer")
    trainer.save = lambda *a, **k: None  # learn() checkpoints at its last step: disk, not GRPO

    rows = completions_per_step(spec["grpo"])
    peaks = rollout_then_learn(timer, lambda: trainer.make_experience(rows), trainer.learn)

    records = read_metrics(trainer.logging_dir)
    train = [r for r in records if r["kind"] == "train"]
    rollout = next(r for r in records if r["kind"] == "rollout")
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    write_result(args.out, {
        **timer.step_summary(),
        "peak_rss_after": peaks,
        "optimizer_steps": len(train),
        "completions": rows,
        "trainable_params": trainable,
        "optimizer": type(engine.opt.optimizer if hasattr(engine.opt, "optimizer") else engine.opt).__name__,
        "trainer": type(trainer).__name__,
        "trainer_metrics": {  # the trainer's own figures, as a cross-check of the wrapped timers
            **{k: v for k, v in rollout.items() if k.startswith(("time/", "tokens_per_second/", "rollout_scores/mean",
                                                                    "completions/"))},
            **{k: train[0][k] for k in ("time/forward", "time/backward", "losses/total_loss") if train and k in train[0]},
        },
        "cuda_peak_bytes": cuda_peak_bytes(spec["device"]),
        "torch": torch.__version__,
    })


if __name__ == "__main__":
    main()
