"""A few training steps of each method under an accelerate config, then an export check.

    accelerate launch --config_file examples/accelerate/zero3.yaml examples/accelerate/smoke.py ppo out/zero3-ppo

Methods: ppo, ppo_lora, ilql, sft, on trlX's randomwalks with a tiny GPT-2 built from a config
(no downloads). Each run trains 4 steps in micro-batches, then exports the model and checks
on the main process that the export, loaded by plain transformers, holds the trained weights
(LoRA: the adapter, and a merged model where the engine allows). Prints one line per check and exits
non-zero when one fails. ``gpu_smoke.sh`` runs it under every shipped config.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, ByT5Tokenizer, GPT2Config

import rlkit_core as rlkit
from rlkit_accelerate.models.loading import substate
from rlkit_accelerate.sharding import full_state_dict, is_sharded, whole_model_construction
from rlkit_methods import default_ilql_config, default_ppo_config, default_sft_config
from rlkit_methods.rewards.randomwalks import random_walks

TASK = random_walks(seed=1000)
LORA = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["c_attn"], "fan_in_fan_out": True}


def make_config(kind: str, out: Path, **changes):
    base = {"ppo": default_ppo_config, "ilql": default_ilql_config, "sft": default_sft_config}[kind]()
    tokens = len(ByT5Tokenizer())
    method_kwargs = {
        "ppo": dict(num_rollouts=16, chunk_size=8, ppo_epochs=2, gen_kwargs=dict(max_new_tokens=6, top_k=0, do_sample=True)),
        "ilql": dict(gen_kwargs=dict(max_new_tokens=6, top_k=1, beta=1.0)),
        "sft": dict(gen_kwargs=dict(max_new_tokens=6, do_sample=False)),
    }[kind]
    config = base.evolve(
        train=dict(seq_length=12, batch_size=8, minibatch_size=4, epochs=100, total_steps=4, eval_interval=4,
                   checkpoint_interval=4, checkpoint_dir=str(out / "ckpts"), save_best=False, seed=7),
        model=dict(model_path="unused", num_layers_unfrozen=1),
        tokenizer=dict(tokenizer_path="byt5"),
        optimizer=dict(kwargs=dict(lr=1e-3)),
        method=method_kwargs,
    )
    config = config.evolve(**changes) if changes else config
    # no dropout: the same steps give the same weights under every engine
    config.model.model_path = GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=32, vocab_size=tokens,
                                         bos_token_id=1, eos_token_id=1, pad_token_id=0,
                                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return config


def train(name: str, out: Path, **config_changes):
    """Train ``name`` (``ppo``, ``ppo_lora``, ``ilql``, ``sft``); ``config_changes`` go to ``evolve``."""
    lora = name.endswith("_lora")
    method = name.removesuffix("_lora")
    config = make_config(method, out, **config_changes)
    if lora:
        config.model.peft_config = LORA
    prompts = TASK.eval_prompts[:8]
    walks = TASK.walks[:64]
    if method == "ppo":
        kwargs = dict(reward_fn=lambda samples, **_: TASK.metric(samples)["optimality"], prompts=prompts)
    elif method == "ilql":
        kwargs = dict(samples=walks, rewards=[TASK.optimality(w) for w in walks])
    else:
        kwargs = dict(samples=walks)
    return rlkit.train(config=config, eval_prompts=prompts, metric_fn=TASK.metric, **kwargs)


def main() -> int:
    out = Path(sys.argv[2])
    lora = sys.argv[1].endswith("_lora")
    method = sys.argv[1].removesuffix("_lora")
    prompts = TASK.eval_prompts[:8]
    trainer = train(sys.argv[1], out)
    acc = trainer.accelerator
    checks = {"steps": trainer.iter_count == 4}

    tokenizer = trainer.tokenizer
    batch = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    greedy = dict(max_new_tokens=6, do_sample=False, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    if method == "ilql":  # Q-guidance off, top-1: the plain LM's greedy decoding
        greedy = dict(greedy, beta=0.0, top_k=1)
        del greedy["do_sample"]
    trainer.model.eval()
    expected = trainer.generate(batch.input_ids, batch.attention_mask, **greedy).cpu()
    export = out / "export"
    trainer.save_pretrained(export)
    trained = full_state_dict(trainer.model)  # gathered on the main process when sharded
    if trained is None:
        trained = trainer.unwrapped_model.state_dict()
    if lora:  # one merged model; FSDP cannot merge a sharded adapter and says so
        try:
            trainer.save_pretrained(out / "merged", merge_adapters=True)
            export = out / "merged"
        except rlkit.ConfigError as error:
            checks["clear merge error under sharding"] = is_sharded(trainer.model) and "merge_adapters" in str(error)
            export = None
    if acc.is_main_process:
        if lora:
            checks["adapter export"] = (out / "export" / "adapter_config.json").is_file()
        with whole_model_construction(acc):  # a plain model, not one for ZeRO-3 to partition
            model = AutoModelForCausalLM.from_pretrained(export, dtype=torch.float32) if export else None
        if model is not None and not lora:
            base = substate(trained, "base_model") if hasattr(trainer.unwrapped_model, "heads_file") else trained
            checks["export holds the trained weights"] = all(
                key in base and torch.equal(value, base[key].float().cpu()) for key, value in model.state_dict().items())
        if model is not None:
            got = model.eval().generate(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                                        max_new_tokens=6, do_sample=False,
                                        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
            # informational: the trainer may generate in bf16 (DeepSpeed, FSDP), the export in fp32
            same = "same" if torch.equal(got, expected) else "differs"
            print(f"{sys.argv[1]}: greedy generation of the fp32 export vs the trainer: {same}", flush=True)
        print(f"{sys.argv[1]} under {acc.distributed_type} x{acc.num_processes} ({acc.mixed_precision}): "
              + ", ".join(f"{name}={'ok' if ok else 'FAILED'}" for name, ok in checks.items()), flush=True)
    failed = [name for name, ok in checks.items() if not ok]
    acc.wait_for_everyone()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
