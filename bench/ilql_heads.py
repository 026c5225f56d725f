"""ILQL head options on SmolLM2-135M: parameter counts and the time of one training step each.

    python bench/ilql_heads.py [--heads mlp,embedding] [--steps 3] [--batch 8] [--seq 48] [--threads 1]

The model and batch shape of ``examples/sentiments/ilql_smollm2.yml`` (SmolLM2-135M, 4 blocks
unfrozen, two Q heads, batch 8 of IMDB reviews cut to 48 tokens), built directly (no trainer:
the trainers do not pass ``method.q_heads`` yet): ``CausalLMWithILQLHeads(q_heads=...)``,
forward at every state and action, ``ILQLConfig.loss``, backward, fused AdamW step. One
untimed step, then ``--steps`` timed by CPU time (1 thread) and wall time. Each option runs in
its own process, one after the other.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def one_option(kind: str, steps: int, batch: int, seq: int, threads: int) -> dict:
    import torch

    from rlkit_accelerate.assets import resolve
    from rlkit_accelerate.models.ilql_heads import CausalLMWithILQLHeads
    from rlkit_accelerate.models.ilql_small_heads import head_parameters
    from rlkit_accelerate.models.loading import load_causal_lm
    from rlkit_methods.data.imdb import imdb_samples
    from rlkit_methods.ilql.config import ILQLConfig
    from transformers import AutoTokenizer

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    folder = resolve("smollm2-135m")
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = CausalLMWithILQLHeads(load_causal_lm(str(folder)), two_qs=True, alpha=0.1, num_layers_unfrozen=4, q_heads=kind)
    items = imdb_samples(n=batch, max_words=24, seed=0)
    texts = [item["sample"] if isinstance(item, dict) else item for item in items]
    texts = ["".join(t) if isinstance(t, list) else t for t in texts]
    enc = tokenizer(texts, padding="max_length", truncation=True, max_length=seq, return_tensors="pt")
    T = enc.input_ids.shape[1]
    mask = enc.attention_mask
    dones = torch.cat([mask[:, 1:], torch.zeros(batch, 1, dtype=mask.dtype)], dim=1)  # 1 while another token follows
    rewards = torch.zeros(batch, T - 1)
    last = mask.sum(1) - 2  # reward on the last action
    rewards[torch.arange(batch), last] = torch.tensor([float(i % 2) for i in range(batch)])
    labels = argparse.Namespace(input_ids=enc.input_ids, attention_mask=mask, rewards=rewards, dones=dones,
                                states_ixs=torch.arange(T).repeat(batch, 1), actions_ixs=torch.arange(T - 1).repeat(batch, 1))
    method = ILQLConfig(tau=0.7, gamma=0.99, cql_scale=0.1, awac_scale=1, alpha=0.1, beta=0)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=5e-5, fused=True)

    def step():
        out = model(labels.input_ids, labels.attention_mask, states_ixs=labels.states_ixs, actions_ixs=labels.actions_ixs)
        loss, _ = method.loss((out.logits, (out.qs, out.target_qs, out.vs)), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss)

    step()  # untimed: allocations, optimizer state
    cpu, wall = time.process_time(), time.perf_counter()
    losses = [step() for _ in range(steps)]
    cpu, wall = (time.process_time() - cpu) / steps, (time.perf_counter() - wall) / steps
    base = sum(p.numel() for p in model.base_model.parameters())
    return {"q_heads": kind, "cpu_s_per_step": cpu, "wall_s_per_step": wall, "losses": losses,
            "head_params": head_parameters(model.ilql_heads), "model_params": base,
            "trainable_params": sum(p.numel() for p in params), "batch": batch, "seq": T, "threads": threads}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--heads", default="mlp,embedding")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=48)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: run one option in this process
    args = p.parse_args()
    if args.one:
        print(json.dumps(one_option(args.one, args.steps, args.batch, args.seq, args.threads)))
        return 0
    rows = []
    for kind in [k.strip() for k in args.heads.split(",") if k.strip()]:
        argv = [sys.executable, __file__, "--one", kind, "--steps", str(args.steps), "--batch", str(args.batch),
                "--seq", str(args.seq), "--threads", str(args.threads)]
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"ilql_heads: {kind} failed: {done.stderr.strip().splitlines()[-1:]}")
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print("| q_heads | Q heads (2) | target Q heads (2) | V head | model | trainable | CPU s/step | wall s/step |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        h = r["head_params"]
        print(f"| {r['q_heads']} | {h['q'] / 1e6:.2f} M | {h['target_q'] / 1e6:.2f} M | {h['v'] / 1e6:.2f} M | "
              f"{r['model_params'] / 1e6:.1f} M | {r['trainable_params'] / 1e6:.1f} M | {r['cpu_s_per_step']:.2f} | "
              f"{r['wall_s_per_step']:.2f} |")
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
