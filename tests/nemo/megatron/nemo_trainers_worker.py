"""torchrun worker (2 CPU processes, gloo): rlkit_core.train with NeMoPPOTrainer and
NeMoILQLTrainer for 2 steps each at TP=2 (the tiny CPU Megatron YAML), starting from a tiny
HF GPT-2 folder, then the HF export. Writes OUT/trainers_<rank>.json.
Usage: torchrun --nproc_per_node 2 nemo_trainers_worker.py OUT"""

import json
import sys
from importlib.resources import files
from pathlib import Path

from conftest import patch_for_cpu

patch_for_cpu()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import yaml  # noqa: E402

import rlkit_core  # noqa: E402
from rlkit_methods import default_ilql_config, default_ppo_config, default_sft_config  # noqa: E402

YAML = str(files("rlkit_nemo") / "configs" / "megatron_tiny_cpu.yaml")


def tiny_gpt2(path):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=384, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=1, eos_token_id=1)).save_pretrained(path)


def config(default, trainer, hf, **method):
    return default().evolve(
        train=dict(trainer=trainer, total_steps=2, batch_size=2, seq_length=32, eval_interval=2,
                   checkpoint_interval=2, checkpoint_dir=str(CKPTS / trainer), trainer_kwargs=dict(megatron_cfg=YAML, pretrained_model=hf)),
        model=dict(model_path=hf), tokenizer=dict(tokenizer_path="byt5"), method=method,
    )


CKPTS = Path(sys.argv[1]) / "ckpts"


def reward_fn(samples, prompts, outputs, **kwargs):
    return [float(o.count("a")) for o in outputs]


class TargetAtStart:
    """Keeps the target-Q weights as they were when training started."""

    @rlkit_core.hookimpl
    def rlkit_train_start(self, trainer, config, is_main_process):
        self.target = trainer.engine.module.heads.target_q_heads[0].out.weight.detach().clone()


def main(out):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    hf = str(out / "hf")
    if rank == 0:
        tiny_gpt2(hf)
    dist.barrier()
    results = {}

    ppo = config(default_ppo_config, "NeMoPPOTrainer", hf, num_rollouts=4, chunk_size=2, ppo_epochs=1,
                 gen_kwargs=dict(max_new_tokens=6, top_k=0, top_p=1.0, do_sample=True))
    from rlkit_nemo import NeMoILQLTrainer, NeMoPPOTrainer
    from rlkit_nemo.models.gpt import causal_padding_mask

    fresh = NeMoPPOTrainer(ppo, reward_fn=reward_fn, **ppo.train.trainer_kwargs)
    ids = torch.tensor([[100, 101, 100, 100, 101]])
    args = (ids, torch.arange(5)[None], causal_padding_mask(torch.ones_like(ids)))
    with torch.no_grad():
        policy_logits, _ = fresh.engine.module(*args)
        ref_logits = fresh.ref(*args)
    del fresh
    trainer = rlkit_core.train(reward_fn=reward_fn, prompts=["ab", "ba", "aa", "bb"], config=ppo)
    from transformers import GPT2LMHeadModel

    initial = {k: v for k, v in GPT2LMHeadModel.from_pretrained(hf).state_dict().items()}
    trainer.save_pretrained(str(out / "ppo_hf"))
    exported = GPT2LMHeadModel.from_pretrained(str(out / "ppo_hf")).state_dict()
    results["ppo"] = {
        "steps": trainer.iter_count,
        "ref_vs_policy_at_step0": float((policy_logits - ref_logits).abs().max()),
        "losses": [h["losses/total_loss"] for h in trainer.history if "eval" not in h],
        "evals": [h for h in trainer.history if "eval" in h],
        "rollouts": len(trainer.store),
        "trained_changed_weights": any(not torch.equal(exported[k], initial[k]) for k in initial if k in exported),
        "tp_group_rank": trainer.engine.ps.get_tensor_model_parallel_rank(),
    }

    ilql = config(default_ilql_config, "NeMoILQLTrainer", hf, steps_for_target_q_sync=1,
                  gen_kwargs=dict(max_new_tokens=4, top_k=5, beta=1.0, temperature=1.0))
    samples = [["ab", "aa"], ["ba", "bb"], ["aa", "ab"], ["bb", "ba"]]
    start = TargetAtStart()
    trainer = rlkit_core.train(samples=samples, rewards=[1.0, 0.0, 1.0, 0.0], config=ilql, plugins=[start])
    target_now = trainer.engine.module.heads.target_q_heads[0].out.weight
    generated = trainer.generate(torch.tensor([[97, 98]]) + 3)  # "ab" in ByT5 ids
    # a logit mask that forbids every token but "a" (ByT5 id 100) after any token
    trainer.logit_mask = torch.ones(384, 384, dtype=torch.bool)
    trainer.logit_mask[:, 100] = False
    masked = trainer.generate(torch.tensor([[97, 98]]) + 3)[0, 2:].tolist()
    trainer.logit_mask = None
    results["ilql"] = {
        "masked_generation": masked,
        "steps": trainer.iter_count,
        "losses": [h["losses/loss"] for h in trainer.history if "eval" not in h],
        "target_moved": float((target_now - start.target).abs().max()),  # frozen: only syncs move it
        "generated": generated[0].tolist(),
    }
    # checkpoint: each TP rank saves its shard; a new trainer loads it back
    trainer.save(str(out / "ilql_ckpt"))
    before = trainer.engine.module.state_dict()
    again = NeMoILQLTrainer(ilql, **ilql.train.trainer_kwargs)
    again.load(str(out / "ilql_ckpt"))
    after = again.engine.module.state_dict()
    results["ilql"]["checkpoint_round_trip"] = again.iter_count == 2 and all(
        torch.equal(before[k], after[k]) for k in before if isinstance(before[k], torch.Tensor)
    )

    # PP=2: ILQL's steps through the 1F1B schedule, one layer per stage, heads on the last
    pp2 = yaml.safe_load(Path(YAML).read_text())
    pp2["model"].update(tensor_model_parallel_size=1, pipeline_model_parallel_size=2)
    ilql_pp = ilql.evolve(train=dict(trainer_kwargs=dict(megatron_cfg=pp2, pretrained_model=hf), checkpoint_interval=100))
    trainer = rlkit_core.train(samples=samples, rewards=[1.0, 0.0, 1.0, 0.0], config=ilql_pp)
    results["ilql_pp2"] = {
        "steps": trainer.iter_count, "stage": trainer.engine.ps.get_pipeline_model_parallel_rank(),
        "losses": [h["losses/loss"] for h in trainer.history if "eval" not in h],
        "has_heads": trainer.engine.module.heads is not None,
    }

    sft = config(default_sft_config, "NeMoSFTTrainer", hf, gen_kwargs=dict(max_new_tokens=4))
    trainer = rlkit_core.train(samples=[["ab", "aa"], ["ba", "bb"]] * 2, config=sft)
    results["sft"] = {"steps": trainer.iter_count, "losses": [h["losses/loss"] for h in trainer.history if "eval" not in h]}
    (out / f"trainers_{rank}.json").write_text(json.dumps(results, indent=1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
