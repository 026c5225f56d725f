"""One PPO step and one ILQL step (and one SFT step) of the NeMo trainers on a real GPU in
bf16 (megatron_amp_O2: bf16 weights, fp32 master weights in Megatron's optimizer), from a small
Llama built from a config. Run by gpu_smoke.sh under torchrun; prints one line per phase.

    torchrun --nproc_per_node N gpu_smoke.py OUT_DIR [TP]
"""

import json
import os
import sys
import time
from importlib.resources import files
from pathlib import Path

import torch
import torch.distributed as dist
import yaml

import rlkit_core
from rlkit_methods import default_ilql_config, default_ppo_config, default_sft_config


def megatron_yaml(out: Path, tp: int) -> str:
    """The shipped 1.3B YAML, resized to this node: all GPUs, TP as asked, small batches."""
    cfg = yaml.safe_load((files("rlkit_nemo") / "configs" / "megatron_1.3b.yaml").read_text())
    world = int(os.environ.get("WORLD_SIZE", 1))
    cfg["trainer"].update(devices=world, num_nodes=1, max_steps=1)
    cfg["model"].update(tensor_model_parallel_size=tp, micro_batch_size=2, global_batch_size=2 * (world // tp),
                        encoder_seq_length=128, max_position_embeddings=128)
    cfg["exp_manager"].update(explicit_log_dir=str(out / "logs"))
    path = out / "megatron_smoke.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def small_llama(path: Path) -> str:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=384, hidden_size=512, intermediate_size=1376, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=128,
                         bos_token_id=1, eos_token_id=1, pad_token_id=0, tie_word_embeddings=False)
    LlamaForCausalLM(config).save_pretrained(path)
    return str(path)


def config(default, trainer, hf, megatron_cfg, **method):
    return default().evolve(
        train=dict(trainer=trainer, total_steps=1, batch_size=2, seq_length=64, eval_interval=100, checkpoint_interval=100,
                   checkpoint_dir=str(OUT / trainer), trainer_kwargs=dict(megatron_cfg=megatron_cfg, pretrained_model=hf)),
        model=dict(model_path=hf), tokenizer=dict(tokenizer_path="byt5"), method=method,
    )


def last_step(trainer) -> dict:
    """The last train record of the run's metrics file (written by the main process)."""
    trainer.engine.barrier()
    lines = (Path(trainer.config.train.checkpoint_dir) / "logs" / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == "train"][-1]


def say(rank, **fields):
    if rank == 0:
        print(json.dumps(fields), flush=True)


OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("runs/nemo_gpu_smoke")


def main(out: Path, tp: int) -> None:
    assert torch.cuda.is_available(), "gpu_smoke.py needs a CUDA GPU"
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    rank = dist.get_rank()
    out.mkdir(parents=True, exist_ok=True)
    hf = str(out / "llama")
    if rank == 0:
        small_llama(Path(hf))
    dist.barrier()
    mcfg = megatron_yaml(out, tp)
    say(rank, device=torch.cuda.get_device_name(), torch=torch.__version__, world=dist.get_world_size(), tp=tp)

    t = time.perf_counter()
    ppo = config(default_ppo_config, "NeMoPPOTrainer", hf, mcfg, num_rollouts=8, chunk_size=4, ppo_epochs=1,
                 gen_kwargs=dict(max_new_tokens=16, top_k=0, top_p=1.0, do_sample=True))
    trainer = rlkit_core.train(reward_fn=lambda samples, outputs, **k: [float(o.count("a")) for o in outputs],
                               prompts=["ab", "ba", "aa", "bb"] * 2, config=ppo)
    p = next(trainer.engine.module.parameters())
    say(rank, phase="ppo", steps=trainer.iter_count, param_dtype=str(p.dtype), seconds=round(time.perf_counter() - t, 1),
        **{k: v for k, v in last_step(trainer).items() if k.startswith(("losses/", "time/", "policy/grad_norm"))})

    t = time.perf_counter()
    ilql = config(default_ilql_config, "NeMoILQLTrainer", hf, mcfg, gen_kwargs=dict(max_new_tokens=8, top_k=5, beta=1.0))
    trainer = rlkit_core.train(samples=[["ab", "aa"], ["ba", "bb"]] * 4, rewards=[1.0, 0.0] * 4, config=ilql)
    say(rank, phase="ilql", steps=trainer.iter_count, seconds=round(time.perf_counter() - t, 1),
        **{k: v for k, v in last_step(trainer).items() if k.startswith(("losses/", "policy/grad_norm"))})

    t = time.perf_counter()
    sft = config(default_sft_config, "NeMoSFTTrainer", hf, mcfg, gen_kwargs=dict(max_new_tokens=8))
    trainer = rlkit_core.train(samples=[["ab", "aa"], ["ba", "bb"]] * 4, config=sft)
    say(rank, phase="sft", steps=trainer.iter_count, seconds=round(time.perf_counter() - t, 1),
        loss=last_step(trainer)["loss"])
    trainer.save_pretrained(str(out / "sft_hf"))
    say(rank, phase="export", hf_files=sorted(os.listdir(out / "sft_hf")))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 1)
