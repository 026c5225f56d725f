"""torchrun worker (2 CPU processes, gloo): a tiny Megatron GPT with rlkit's heads at TP=1
(two data-parallel replicas), TP=2 and PP=2, on the same weights.

For PPO and ILQL it records, per rank, in ``OUT/results_<rank>.json``:
* the loss of Megatron's forward-backward schedule and rlkit-methods' loss (``method.loss``)
  on the TP=1 model's full logits and heads, computed in plain torch;
* TP=2 logits/heads against TP=1's; the heads' values on each TP rank;
* gradient norms of the heads and of the embedding after backward.
Usage: torchrun --nproc_per_node 2 megatron_parallel_worker.py OUT
"""

import json
import sys
from pathlib import Path

from conftest import patch_for_cpu

patch_for_cpu()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from megatron.core import parallel_state as ps  # noqa: E402
from megatron.core import tensor_parallel  # noqa: E402
from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed  # noqa: E402

from rlkit_methods import ILQLConfig, PPOConfig  # noqa: E402
from rlkit_methods.common.stats import logprobs_of_labels  # noqa: E402
from rlkit_methods.data.padding import position_ids_from_mask  # noqa: E402
from rlkit_methods.ilql.store import ILQLBatch  # noqa: E402
from rlkit_methods.ppo.store import PPORLBatch  # noqa: E402
from rlkit_methods.ilql.losses import ilql_loss  # noqa: E402
from rlkit_methods.ppo.trainer import PPOTrainBatch  # noqa: E402
from rlkit_nemo.forwards import model_inputs  # noqa: E402
from rlkit_nemo.models.from_yaml import build_gpt  # noqa: E402
from rlkit_nemo.models.gpt import causal_padding_mask  # noqa: E402
from rlkit_nemo.models.heads import ILQLHeads, ParallelMLPHead  # noqa: E402
from rlkit_nemo.models.sharding import full_state_dict, load_full_state_dict  # noqa: E402
from rlkit_nemo.schedule import forward_backward  # noqa: E402

VOCAB = 64
MODEL = dict(
    num_layers=2, hidden_size=32, ffn_hidden_size=64, num_attention_heads=4, encoder_seq_length=16,
    share_embeddings_and_output_weights=False, hidden_dropout=0.0, attention_dropout=0.0,
)
METHOD_CONFIGS = {
    "ppo": PPOConfig(cliprange=0.2, cliprange_value=0.2, vf_coef=0.5),
    "ilql": ILQLConfig(tau=0.7, gamma=0.99, cql_scale=0.1, awac_scale=1.0, beta=0.5, two_qs=True),
}


KINDS = {"ppo": "response", "ilql": "ilql"}


def prepare_ppo(config, rollouts):
    advantages, returns = config.get_advantages_and_returns(rollouts.values, rollouts.rewards, mask=rollouts.response_mask)
    return PPOTrainBatch(rollouts, advantages, returns)


def method_loss(method, outputs, batch):
    """rlkit-methods' loss on the engine's forward-kind outputs (what the method trainers do)."""
    config = METHOD_CONFIGS[method]
    if method == "ppo":
        b = batch.rollouts
        value, stats = config.loss(outputs["logprobs"], outputs["values"], b.logprobs, b.values, batch.advantages,
                                   batch.returns, b.response_mask)
    else:
        actions = batch.input_ids[:, 1:].gather(1, batch.actions_ixs)
        value, stats = ilql_loss(outputs["action_logits"], outputs["qs"], outputs["target_qs"], outputs["vs"], actions,
                                 batch.rewards, batch.dones, gamma=config.gamma, tau=config.tau, cql_scale=config.cql_scale,
                                 awac_scale=config.awac_scale, beta=config.beta)
    return value, {"loss": value.detach().clone(), **stats}


def heads_for(method):
    if method == "ppo":
        return lambda config, vocab: ParallelMLPHead(config, MODEL["hidden_size"], 1)
    return lambda config, vocab: ILQLHeads(config, MODEL["hidden_size"], vocab, two_qs=True)


def ppo_batch(g):
    B, Q, R = 2, 4, 4
    query, response = torch.randint(1, VOCAB, (B, Q), generator=g), torch.randint(1, VOCAB, (B, R), generator=g)
    query_mask = torch.ones(B, Q, dtype=torch.long)
    query_mask[0, :2] = 0  # left padding
    response_mask = torch.ones(B, R, dtype=torch.long)
    response_mask[1, -1] = 0  # right padding after EOS
    attention_mask = torch.cat([query_mask, response_mask], 1)
    rand = lambda: torch.randn(B, R, generator=g) * response_mask  # noqa: E731
    return PPORLBatch(
        query_tensors=query, response_tensors=response, logprobs=rand() - 3.0, values=rand(), rewards=rand(),
        response_mask=response_mask, attention_mask=attention_mask, position_ids=position_ids_from_mask(attention_mask),
    )


def ilql_batch(g):
    B, T, prompt = 2, 8, 3
    input_ids = torch.randint(1, VOCAB, (B, T), generator=g)
    actions_ixs = torch.arange(prompt - 1, T - 1).repeat(B, 1)  # (B, A)
    states_ixs = torch.cat([actions_ixs, torch.full((B, 1), T - 1)], 1)  # (B, A + 1)
    dones = torch.ones_like(states_ixs)
    dones[:, -1] = 0
    rewards = torch.zeros(actions_ixs.shape)
    rewards[:, -1] = torch.tensor([1.0, -1.0])
    attention_mask = torch.ones(B, T, dtype=torch.long)
    return ILQLBatch(
        input_ids=input_ids, attention_mask=attention_mask, rewards=rewards, states_ixs=states_ixs,
        actions_ixs=actions_ixs, dones=dones, position_ids=position_ids_from_mask(attention_mask),
    )


def setup(tp, pp, method):
    ps.destroy_model_parallel()
    ps.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp)
    torch.manual_seed(1234)
    model_parallel_cuda_manual_seed(1234)
    cfg = dict(MODEL, tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp)
    return build_gpt(cfg, VOCAB, make_heads=heads_for(method), cpu=True)


def forward(model, method, batch):
    """Direct forward of a whole (single-stage) model: full logits and heads, gathered over TP."""
    x = model_inputs(KINDS[method], batch)
    logits, heads = model(x["input_ids"], x["position_ids"], causal_padding_mask(x["attention_mask"]), head_kwargs=x["head_kwargs"])
    gather = tensor_parallel.gather_from_tensor_model_parallel_region
    if method == "ppo":
        return gather(logits), heads
    qs, target_qs, vs = heads
    return gather(logits), ([gather(q) for q in qs], [gather(q) for q in target_qs], vs)


def reference_loss(method, logits, heads, batch):
    """rlkit-methods' loss, as the accelerate trainers call it, on full tensors."""
    config = METHOD_CONFIGS[method]
    if method == "ppo":
        batch = batch.rollouts
        R = batch.response_tensors.shape[1]
        mask = batch.response_mask
        advantages, returns = config.get_advantages_and_returns(batch.values, batch.rewards, mask=mask)
        logprobs = logprobs_of_labels(logits[:, -R - 1 : -1], batch.response_tensors)
        values = heads[:, -R - 1 : -1, 0]
        return config.loss(logprobs, values, batch.logprobs, batch.values, advantages, returns, mask)[0]
    return config.loss((logits, heads), batch)[0]


def run_schedule(model, method, batch):
    model.zero_grad(set_to_none=True)
    stats = forward_backward(model, [batch], KINDS[method], lambda out, b: method_loss(method, out, b))
    return float(stats[0]["loss"]) if stats else None


def grad_norms(model):
    norms = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            key = name.split(".")[0] + ("." + name.split(".")[1] if name.startswith("heads") else "")
            norms[key] = norms.get(key, 0.0) + (0.0 if p.grad is None else float(p.grad.float().norm()) ** 2)
    return {k: v**0.5 for k, v in norms.items()}


def head_values(method, heads):
    return heads if method == "ppo" else heads[2]


def converted_at_tp2():
    """HF Llama (grouped-query attention, gated MLP) and GPT-2 (tied) weights at TP=2:
    logits against the HF model's, and the gathered weights against the converted ones."""
    from test_megatron_convert import tiny_hf

    from rlkit_nemo.convert import hf_to_megatron, megatron_model_config

    out = {}
    for kind in ("llama", "gpt2"):
        hf = tiny_hf(kind)
        full = hf_to_megatron(hf.state_dict(), hf.config)
        ps.destroy_model_parallel()
        ps.initialize_model_parallel(tensor_model_parallel_size=2)
        model_parallel_cuda_manual_seed(0)
        model = build_gpt(dict(megatron_model_config(hf.config), tensor_model_parallel_size=2), VOCAB, cpu=True).eval()
        load_full_state_dict(model, full)
        ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            expected = hf(input_ids=ids).logits
            logits = model(ids, torch.arange(12).repeat(2, 1), causal_padding_mask(torch.ones_like(ids)))
            got = tensor_parallel.gather_from_tensor_model_parallel_region(logits)
        out[kind] = {
            "tp2_vs_hf_max_diff": float((got - expected).abs().max()),
            "tp2_gathered_equals_converted": all(torch.equal(full[k], v) for k, v in full_state_dict(model).items()),
        }
    return out


def main(out):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    g = torch.Generator().manual_seed(0)
    rollouts = ppo_batch(g)
    batches = {"ppo": prepare_ppo(METHOD_CONFIGS["ppo"], rollouts), "ilql": ilql_batch(g)}
    results = {}
    for method, batch in batches.items():
        r = results[method] = {}
        # TP=1, PP=1: two data-parallel replicas with the same weights
        model = setup(1, 1, method)
        full = full_state_dict(model)
        with torch.no_grad():
            logits1, heads1 = forward(model, method, batch)
        r["reference_loss"] = float(reference_loss(method, logits1, heads1, batch))
        r["tp1_loss"] = run_schedule(model, method, batch)
        r["tp1_grads"] = grad_norms(model)

        # TP=2 on the TP=1 weights
        model = setup(2, 1, method)
        load_full_state_dict(model, full)
        with torch.no_grad():
            logits2, heads2 = forward(model, method, batch)
        r["tp2_logits_max_diff"] = float((logits2 - logits1).abs().max())
        v2 = head_values(method, heads2)
        r["tp2_values_max_diff"] = float((v2 - head_values(method, heads1)).abs().max())
        if method == "ilql":
            r["tp2_q_max_diff"] = max(float((a - b).abs().max()) for a, b in zip(heads2[0], heads1[0]))
        values_per_rank = [torch.empty_like(v2) for _ in range(2)]
        dist.all_gather(values_per_rank, v2.contiguous(), group=ps.get_tensor_model_parallel_group())
        r["tp2_values_equal_on_ranks"] = bool(torch.equal(values_per_rank[0], values_per_rank[1]))
        r["tp2_loss"] = run_schedule(model, method, batch)
        r["tp2_grads"] = grad_norms(model)

        # PP=2 on the same weights: one layer per stage, activations sent between ranks
        model = setup(1, 2, method)
        load_full_state_dict(model, full)
        r["pp2_stage"] = ps.get_pipeline_model_parallel_rank()
        r["pp2_loss"] = run_schedule(model, method, batch)
        r["pp2_grads"] = grad_norms(model)
        r["pp2_roundtrip_equal"] = all(torch.equal(full[k], v) for k, v in full_state_dict(model).items())
    results["convert"] = converted_at_tp2()
    ps.destroy_model_parallel()
    Path(out, f"results_{rank}.json").write_text(json.dumps(results, indent=1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
