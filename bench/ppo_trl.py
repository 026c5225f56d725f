"""Bench worker (peer): one PPO step of TRL 0.29.1 (``trl.experimental.ppo.PPOTrainer``) on
the same model, prompts, batch and generation length as ``ppo_rlkit.py``.

    python bench/ppo_trl.py --spec spec.json --out result.json

Runs in the peer's environment (no rlkit there). TRL's PPO needs four models: the policy, a
separate reference, and a value and a reward model, which are sequence classifiers (one
score) loaded from the same weights with a seeded new head. Both sides sample exactly
``new_tokens`` tokens (``min_new_tokens``; TRL's own config has no such setting, so the bench
sets it on the generation config TRL passes to ``batch_generation``); no stop token.
Phases are timed by wrapping TRL's own module-level helpers (``batch_generation``,
``forward``, ``get_reward``) and the accelerator's backward and the optimizer's step.
"""

from __future__ import annotations

import tempfile

from harness import PhaseTimer, cuda_peak_bytes, peak_rss_bytes, grad_phase, read_spec, setup_torch, worker_args, write_result


def main() -> None:
    args = worker_args(__doc__.splitlines()[0])
    spec = read_spec(args.spec)
    torch, _, dtype = setup_torch(spec)
    s = spec["ppo"]
    timer = PhaseTimer(spec["device"])
    with timer.section("load"):
        import trl
        import trl.experimental.ppo.ppo_trainer as ppo_module
        from datasets import Dataset
        from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer
        from trl.experimental.ppo import PPOConfig, PPOTrainer

        tokenizer = AutoTokenizer.from_pretrained(spec["model"], padding_side="left")
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token  # rlkit's rule, for the same padding
        policy = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=dtype)
        reference = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=dtype)
        value = AutoModelForSequenceClassification.from_pretrained(spec["model"], num_labels=1, dtype=dtype)
        reward = AutoModelForSequenceClassification.from_pretrained(spec["model"], num_labels=1, dtype=dtype)
        prompts = Dataset.from_dict({"input_ids": [tokenizer(p).input_ids for p in spec["prompts"]]})
        config = PPOConfig(
            output_dir=tempfile.mkdtemp(prefix="trl-bench-"), report_to="none", save_strategy="no",
            disable_tqdm=True, logging_strategy="no", seed=spec["seed"],
            per_device_train_batch_size=s["batch_size"], gradient_accumulation_steps=1, num_mini_batches=1,
            local_rollout_forward_batch_size=s["batch_size"], total_episodes=s["batch_size"],
            num_ppo_epochs=s["ppo_epochs"], response_length=s["new_tokens"], stop_token=None,
            missing_eos_penalty=None, num_sample_generations=0, learning_rate=s["lr"], kl_coef=s["kl_coef"],
            vf_coef=s["vf_coef"], bf16=False, gradient_checkpointing=False,  # weights are loaded in the spec's dtype
            use_cpu=spec["device"] == "cpu",
        )
        trainer = PPOTrainer(args=config, processing_class=tokenizer, model=policy, ref_model=reference,
                             reward_model=reward, value_model=value, train_dataset=prompts, eval_dataset=prompts)

    def reward_or_value(model, *a, **k) -> str:
        return "rollout/value" if model is value else "rollout/reward"

    sample = ppo_module.batch_generation

    def exact_length(model, queries, batch_size, pad_token_id, generation_config):
        # TRL stops when every row has sampled EOS; rlkit's side samples exactly new_tokens
        generation_config.min_new_tokens = generation_config.max_new_tokens
        return sample(model, queries, batch_size, pad_token_id, generation_config)

    ppo_module.batch_generation = exact_length
    timer.wrap(ppo_module, "batch_generation", "rollout/generate")
    timer.wrap(ppo_module, "forward", grad_phase("rollout/reference", "train/policy+value forward"))
    timer.wrap(ppo_module, "get_reward", reward_or_value)
    timer.wrap(trainer.accelerator, "backward", "train/backward")
    timer.wrap(trainer.optimizer, "step", "train/optimizer")
    peaks = {"load": peak_rss_bytes()}  # where the process's peak memory is reached
    rollout_end = ppo_module.forward  # the first train-time forward ends the rollout

    def first_train_forward(*args, **kwargs):
        import torch

        if torch.is_grad_enabled() and "rollout" not in peaks:
            peaks["rollout"] = peak_rss_bytes()
        return rollout_end(*args, **kwargs)

    ppo_module.forward = first_train_forward
    with timer.section("other"):  # GAE, whitening, logging, gc.collect(), ...
        trainer.train()
    peaks["train"] = peak_rss_bytes()

    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    write_result(args.out, {
        **timer.step_summary(),
        "peak_rss_after": peaks,
        "optimizer_steps": timer.calls.get("train/optimizer", 0),
        "trainable_params": trainable,
        "optimizer": type(trainer.optimizer.optimizer).__name__,
        "cuda_peak_bytes": cuda_peak_bytes(spec["device"]),
        "torch": torch.__version__,
        "trl": trl.__version__,
    })


if __name__ == "__main__":
    main()
