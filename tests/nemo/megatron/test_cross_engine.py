"""The NeMo engine against the accelerate engine (rlkit_core.testing.cross_engine): the same
items, from the same weights, through ``engine.step`` on both, for PPO, ILQL, SFT, GRPO, DPO
and the reward model, at TP=PP=DP=1 on a tiny GPT-2 in fp32 with dropout off. Each step has
two micro-batches on both engines, so a method whose math depends on how a step is cut
differs between them (PPO did, by 0.087, while ``collate`` whitened its advantages: per
micro-batch on accelerate, per step on Megatron; they are whitened over the rollout phase
now). DPO and the reward model step on pairs in micro-batches of an odd number of pairs:
both engines collate each micro-batch's items on their own (the NeMo engine cut one collated
step into rows before, which split a pair at an odd micro_batch_size)."""

import sys
from pathlib import Path

import pytest
import torch

from rlkit_core.testing.cross_engine import compare_records, prepared_trainer, record_steps
from rlkit_methods.grpo.config import default_grpo_config

import nemo_walks

sys.path.insert(0, str(Path(__file__).parents[2] / "accelerate" / "trainers"))
import prefs_setup  # noqa: E402

pytestmark = [pytest.mark.usefixtures("megatron_cpu"), pytest.mark.slow]
ATOL = 5e-5  # fp32: the kernels differ in summation order only (largest seen 8.7e-6, ILQL)
TRAINERS = {"ppo": "PPOTrainer", "ilql": "ILQLTrainer", "sft": "SFTTrainer", "grpo": "GRPOTrainer",
            "dpo": "DPOTrainer", "reward_model": "RewardModelTrainer"}
ROWS, MICRO = 8, 4  # one step: 8 rows in two micro-batches of 4, on both engines
PAIRS, ODD = 6, 3  # DPO, the reward model: 6 pairs (12 rows) in two micro-batches of 3 pairs
PAIR_METHODS = ("dpo", "reward_model")


@pytest.fixture
def both_engines(rlkit_host, register_plugin):
    """A host with both engines: the accelerate plugin is registered for the test when the
    NeMo venv has not installed it (its sources import there: accelerate and transformers 4.x)."""
    import rlkit_accelerate.plugin

    if "accelerate" not in rlkit_host.registry.names("backend"):
        register_plugin(rlkit_accelerate.plugin, "rlkit_accelerate")
    return rlkit_host


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory):
    """One tiny GPT-2 with dropout off, saved once: both engines load these weights."""
    from transformers import GPT2LMHeadModel

    folder = tmp_path_factory.mktemp("gpt2")
    config = nemo_walks.model_config()
    config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = 0.0
    torch.manual_seed(0)
    GPT2LMHeadModel(config).save_pretrained(folder)
    return str(folder)


def config(method, engine, folder, tmp_path):
    rows, micro = (PAIRS, ODD) if method in PAIR_METHODS else (ROWS, MICRO)
    if method in PAIR_METHODS:
        c = prefs_setup.config(method, tmp_path)
    elif method == "grpo":
        c = default_grpo_config().evolve(method=dict(num_generations=4, num_rollouts=16, chunk_size=8, beta=0.05,
                                                     gen_kwargs=dict(max_new_tokens=6, top_k=0, top_p=1.0, do_sample=True)))
        c = c.evolve(train=dict(seq_length=12, epochs=100, checkpoint_interval=100, eval_interval=100, save_best=False, seed=7),
                     model=dict(num_layers_unfrozen=-1), tokenizer=dict(tokenizer_path="byt5"),
                     optimizer=dict(kwargs=dict(lr=1e-3)), scheduler=dict(kwargs=dict(T_max=1000, eta_min=1e-4)))
    else:
        c = nemo_walks.config(method, tmp_path)
    name = ("NeMo" if engine == "nemo" else "Accelerate") + TRAINERS[method]
    kwargs = dict(megatron_cfg=nemo_walks.megatron_cfg(global_batch=rows, micro_batch=micro)) if engine == "nemo" else {}
    # max_grad_norm far above the norm: both engines report the norm, the step is unclipped
    c = c.evolve(train=dict(batch_size=rows, minibatch_size=micro, total_steps=2, trainer=name, max_grad_norm=1e3,
                            checkpoint_dir=str(tmp_path / engine / "ckpts")))
    c.train.trainer_kwargs = kwargs  # replaced, not merged into the walks' Megatron YAML
    c.model.model_path = folder
    return c


def spread_reward(samples, **kwargs):
    """Scores that differ within every GRPO group: the walks' optimality ties often, and a
    group of equal scores has no advantage, so no gradient but float noise, which Adam scales
    up to a full step (a comparison of noise)."""
    return [nemo_walks.TASK.optimality(s) + (sum(map(ord, s)) % 13) / 13 for s in samples]


def built(method, engine, folder, tmp_path):
    """The trainer with its data and the initial weights (no step taken)."""
    task = nemo_walks.TASK
    if method in ("ppo", "grpo"):
        data = dict(reward_fn=spread_reward, prompts=task.eval_prompts[:8])
    elif method == "ilql":
        data = dict(samples=task.walks[:64], rewards=[task.optimality(w) for w in task.walks[:64]])
    elif method in PAIR_METHODS:
        data = dict(samples=prefs_setup.walk_pairs())
    else:
        data = dict(samples=task.walks[:64])
    return prepared_trainer(config=config(method, engine, folder, tmp_path), **data)


def copy_heads(accelerate, nemo):
    """The accelerate engine's heads into the NeMo engine's (trlX's MLP heads,
    Linear -> ReLU -> Linear, are ``up``/``down`` or ``up``/``out`` there; TP=1: whole)."""
    model = accelerate.unwrapped_model
    if getattr(model, "score_head", False):
        return  # a reward model's score head starts at zero on both engines
    if hasattr(model, "ilql_heads"):
        ours = model.ilql_heads
        pairs = [(ours.v_head, nemo.module.heads.v_head)]
        pairs += list(zip(ours.q_heads, nemo.module.heads.q_heads)) + list(zip(ours.target_q_heads, nemo.module.heads.target_q_heads))
    elif getattr(model, "v_head", None) is not None:
        pairs = [(model.v_head, nemo.module.heads)]
    else:
        return
    with torch.no_grad():
        for mlp, head in pairs:
            first, last = head.up, head.down if hasattr(head, "down") else head.out
            for theirs, src in ((first, mlp[0]), (last, mlp[2])):
                assert theirs.weight.shape == src.weight.shape, (theirs.weight.shape, src.weight.shape)
                theirs.weight.copy_(src.weight)
                theirs.bias.copy_(src.bias)


@pytest.mark.parametrize("method", ["ppo", "ilql", "sft", "grpo"])
def test_the_nemo_engine_steps_as_the_accelerate_engine(method, gpt2_folder, both_engines, tmp_path):
    a = built(method, "accelerate", gpt2_folder, tmp_path)
    b = built(method, "nemo", gpt2_folder, tmp_path)
    copy_heads(a.engine, b.engine)
    items = [a.store[i] for i in range(ROWS)]  # one engine's rollouts: the same samples for both
    assert a.engine.batch_sizes() == b.engine.batch_sizes() == (ROWS, MICRO)
    ra = record_steps(a, items, steps=2, export_to=tmp_path / "export-a")
    rb = record_steps(b, items, steps=2, export_to=tmp_path / "export-b")
    diffs = compare_records(ra, rb, atol=ATOL)
    largest = max(diffs, key=diffs.get)
    print(f"{method}: largest difference {diffs[largest]:.3g} ({largest}) over {len(diffs)} quantities")
    assert any(k.startswith("weights/") for k in diffs) and any(k.startswith("outputs/") for k in diffs)
    assert "stats/1/policy/grad_norm" in diffs and ra["stats"][0]["policy/grad_norm"] > 1e-2  # a real step, not noise


@pytest.mark.parametrize("method", PAIR_METHODS)
def test_pairs_in_odd_micro_batches_step_as_on_the_accelerate_engine(method, gpt2_folder, both_engines, tmp_path):
    """micro_batch_size 3 (pairs): the NeMo engine refused it before ("holds half a pair")."""
    a = built(method, "accelerate", gpt2_folder, tmp_path)
    b = built(method, "nemo", gpt2_folder, tmp_path)
    items = [dict(a.store[i]) for i in range(PAIRS)]
    if method == "dpo":  # the reference's log-probs at the initial weights (the same on both engines)
        a.attach_reference(items)
        for i, item in enumerate(items):  # moved off the policy's: at a tie, accuracy is a step of float noise
            item["ref_chosen_logps"] += 0.3 * (-1) ** i
            item["ref_rejected_logps"] -= 0.3 * (-1) ** i
    assert a.engine.batch_sizes() == b.engine.batch_sizes() == (PAIRS, ODD)
    ra = record_steps(a, items, steps=2, export_to=tmp_path / "export-a")
    rb = record_steps(b, items, steps=2, export_to=tmp_path / "export-b")
    diffs = compare_records(ra, rb, atol=ATOL)
    largest = max(diffs, key=diffs.get)
    print(f"{method}: largest difference {diffs[largest]:.3g} ({largest}) over {len(diffs)} quantities")
    # a reward model's forward is its score head's values alone (no LM head over the vocabulary)
    assert any(k.startswith("weights/") for k in diffs) and ("outputs/logprobs" if method == "dpo" else "outputs/values") in diffs
    assert ra["stats"][1]["policy/grad_norm"] > 1e-2  # a real step, not noise
