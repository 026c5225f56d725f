"""Bench worker (peer): one step of TRL 1.16's ``GRPOTrainer`` or ``RLOOTrainer`` on the same
model, prompts, group size, lengths and reward as ``grpo_rlkit.py``.

    python bench/grpo_trl.py --spec spec.json --out result.json --variant grpo-trl|rloo-trl|grpo-trlvllm

``grpo-trlvllm``: TRL's vLLM mode (``use_vllm=True``, ``vllm_mode="colocate"``), in an
interpreter that also has vLLM (``bench/.venv-trl-vllm``, see peer.py).

Runs in ``bench/.venv-trl-grpo`` (no rlkit there; offline: the model is the folder the runner
resolved). One step: ``max_steps=1`` with ``per_device_train_batch_size`` = prompts x
``num_generations``, one gradient accumulation step and one generation per step, so TRL
generates once, scores once, runs the reference (``beta > 0``; RLOO also the policy's
no-grad pass, which its loss needs), and takes one optimizer step. Both sides sample exactly
``new_tokens`` tokens (``generation_kwargs.min_new_tokens``). ``gradient_checkpointing`` and
``bf16`` are off (TRL's GRPO defaults turn both on): fp32 like rlkit's side, and TRL's
fastest step. Phases are timed by wrapping TRL's own methods (``_generate_single_turn``,
``_calculate_rewards``, ``_get_per_token_logps_and_entropies``) and the accelerator's
backward and the optimizer's step.
"""

from __future__ import annotations

import os
import tempfile

from grpo_common import completions_per_step, distinct_words, split_variant
from harness import PhaseTimer, cuda_peak_bytes, peak_rss_bytes, read_spec, setup_torch, worker_args, write_result


def trl_config(spec: dict, method: str, config_cls, output_dir: str, use_vllm: bool = False):
    """TRL's config for the case (the same settings as ``grpo_rlkit.grpo_config``); ``use_vllm``:
    TRL's vLLM mode, colocated (vLLM in the trainer's process, TRL's choice for one device)."""
    g = spec["grpo"]
    fields = dict(
        output_dir=output_dir, report_to="none", save_strategy="no", logging_strategy="no", disable_tqdm=True,
        seed=spec["seed"], use_cpu=spec["device"] == "cpu", bf16=False, gradient_checkpointing=False,
        per_device_train_batch_size=completions_per_step(g), gradient_accumulation_steps=1, steps_per_generation=1,
        num_generations=g["num_generations"], num_iterations=1, max_steps=1, shuffle_dataset=False,
        max_completion_length=g["new_tokens"], generation_kwargs={"min_new_tokens": g["new_tokens"]},
        temperature=1.0, top_p=1.0, top_k=0, learning_rate=g["lr"], adam_beta1=0.9, adam_beta2=0.999,
        adam_epsilon=1e-8, weight_decay=0.0, max_grad_norm=g["max_grad_norm"],
        beta=g["beta"], epsilon=g["epsilon"], epsilon_high=g["epsilon_high"], dataloader_num_workers=0,
    )
    if method == "grpo":
        fields.update(loss_type=g["loss_type"], scale_rewards=g["scale_rewards"])
    if use_vllm:  # vLLM's SamplingParams name the minimum min_tokens; the KV cache is host memory on CPU
        fields.update(use_vllm=True, vllm_mode="colocate", generation_kwargs={"min_tokens": g["new_tokens"]},
                      vllm_max_model_length=128 + g["new_tokens"])
    return config_cls(**fields)


def main() -> None:
    args = worker_args(__doc__.splitlines()[0])
    method, use_vllm = split_variant(args.variant, {"trl": False, "trlvllm": True})
    spec = read_spec(args.spec)
    torch, _, dtype = setup_torch(spec)
    g = spec["grpo"]
    timer = PhaseTimer(spec["device"])
    if use_vllm and spec["device"] == "cpu":
        # what rlkit's vLLM generator sets for a process that also trains (rlkit_vllm/checks.py):
        # no engine-core process, no thread pinning, no core kept back; a KV cache of 1 GB
        for key, value in (("VLLM_ENABLE_V1_MULTIPROCESSING", "0"), ("VLLM_CPU_OMP_THREADS_BIND", "nobind"),
                           ("VLLM_CPU_NUM_OF_RESERVED_CPU", "0"), ("VLLM_CPU_KVCACHE_SPACE", "1")):
            os.environ.setdefault(key, value)
    with timer.section("load"):
        import trl
        from datasets import Dataset
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from trl import GRPOConfig, GRPOTrainer, RLOOConfig, RLOOTrainer

        config_cls, trainer_cls = (GRPOConfig, GRPOTrainer) if method == "grpo" else (RLOOConfig, RLOOTrainer)
        tokenizer = AutoTokenizer.from_pretrained(spec["model"], padding_side="left")
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token  # rlkit's rule, for the same padding
        policy = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=dtype)

        def distinct_words_reward(prompts, completions, **kwargs) -> list[float]:
            return distinct_words(completions, g["new_tokens"])

        config = trl_config(spec, method, config_cls, tempfile.mkdtemp(prefix="trl-bench-"), use_vllm)
        # the reference (beta > 0) is loaded by TRL itself, from the policy's folder
        trainer = trainer_cls(model=policy, reward_funcs=distinct_words_reward, args=config,
                              train_dataset=Dataset.from_dict({"prompt": list(g["prompts"])}), processing_class=tokenizer)

    peaks = {"load": peak_rss_bytes()}  # where the process's peak memory is reached
    ref_model = trainer.ref_model

    def logps_phase(model, *args, **kwargs) -> str:
        if torch.is_grad_enabled():
            if "rollout" not in peaks:  # the first training forward ends the rollout
                peaks["rollout"] = peak_rss_bytes()
            return "train/forward"
        return "rollout/reference" if ref_model is not None and model is ref_model else "rollout/policy logps"

    timer.wrap(trainer, "_generate_single_turn", "rollout/generate")
    timer.wrap(trainer, "_calculate_rewards", "rollout/reward")
    timer.wrap(trainer, "_get_per_token_logps_and_entropies", logps_phase)
    timer.wrap(trainer.accelerator, "backward", "train/backward")
    make_optimizer = trainer.create_optimizer

    def create_optimizer(*a, **k):  # the HF Trainer builds its optimizer inside train()
        optimizer = make_optimizer(*a, **k)
        timer.wrap(trainer.optimizer, "step", "train/optimizer")
        return optimizer

    trainer.create_optimizer = create_optimizer
    with timer.section("other"):  # advantages, padding, the HF Trainer's own loop and set-up, ...
        trainer.train()
    peaks["train"] = peak_rss_bytes()

    optimizer = trainer.optimizer.optimizer if hasattr(trainer.optimizer, "optimizer") else trainer.optimizer
    write_result(args.out, {
        **timer.step_summary(),
        "peak_rss_after": peaks,
        "optimizer_steps": timer.calls.get("train/optimizer", 0),
        "completions": completions_per_step(g),
        "trainable_params": sum(p.numel() for p in trainer.model.parameters() if p.requires_grad),
        "optimizer": type(optimizer).__name__,
        "optimizer_fused": bool(optimizer.defaults.get("fused")),
        "trainer": type(trainer).__name__,
        "cuda_peak_bytes": cuda_peak_bytes(spec["device"]),
        "torch": torch.__version__,
        "trl": trl.__version__,
    })


if __name__ == "__main__":
    main()
