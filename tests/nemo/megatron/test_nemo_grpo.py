"""GRPO and RLOO (rlkit_methods, written once) train randomwalks on the NeMo engine as
NeMoGRPOTrainer / NeMoRLOOTrainer: names no plugin registers, paired from the methods'
trainers and the engine (rlkit_core.pairing); the accelerate side is
tests/accelerate/trainers/test_grpo_trainer.py. Tiny GPT on CPU."""

import pytest

import rlkit_core as rlkit
from rlkit_methods.grpo.config import default_grpo_config, default_rloo_config
from rlkit_methods.run.metrics_log import read_metrics

import nemo_walks

pytestmark = [pytest.mark.usefixtures("megatron_cpu"), pytest.mark.slow]
TRAINERS = {"grpo": ("NeMoGRPOTrainer", default_grpo_config), "rloo": ("NeMoRLOOTrainer", default_rloo_config)}


def run(kind, tmp_path, **method):
    name, default = TRAINERS[kind]
    c = default().evolve(
        train=dict(seq_length=12, batch_size=8, epochs=100, total_steps=6, checkpoint_interval=100, eval_interval=3,
                   checkpoint_dir=str(tmp_path / "ckpts"), save_best=False, seed=7, trainer=name,
                   trainer_kwargs=dict(megatron_cfg=nemo_walks.megatron_cfg())),
        model=dict(model_path="unused", num_layers_unfrozen=-1),
        tokenizer=dict(tokenizer_path="byt5"),
        optimizer=dict(kwargs=dict(lr=1e-3)),
        scheduler=dict(kwargs=dict(T_max=1000, eta_min=1e-4)),
        method=dict(dict(num_generations=4, num_rollouts=16, chunk_size=8,
                         gen_kwargs=dict(max_new_tokens=6, top_k=0, top_p=1.0, do_sample=True)), **method),
    )
    c.model.model_path = nemo_walks.model_config()
    prompts = nemo_walks.TASK.eval_prompts[:8]
    return rlkit.train(config=c, reward_fn=nemo_walks.reward_fn, prompts=prompts, eval_prompts=prompts,
                       metric_fn=nemo_walks.TASK.metric)


@pytest.mark.parametrize("kind, beta", [("grpo", 0.0), ("grpo", 0.1), ("rloo", 0.05)])
def test_grpo_and_rloo_train_on_the_nemo_engine(kind, beta, tmp_path):
    trainer = run(kind, tmp_path, beta=beta)
    assert type(trainer).__name__ == f"NeMo{kind.upper()}Trainer" and type(trainer.engine).__name__ == "MegatronEngine"
    assert (trainer.engine.ref is None) == (beta == 0)  # beta 0: no reference is built
    records = read_metrics(tmp_path / "ckpts" / "logs")
    train = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in train] == list(range(1, 7))
    assert all(abs(r["losses/total_loss"]) < 1e6 for r in train)
    if beta and kind == "grpo":
        assert all(r["policy/kl"] >= 0 for r in train)
    assert [r["step"] for r in records if r["kind"] == "eval"] == [0, 3, 6]
    assert all("metrics/optimality" in r for r in records if r["kind"] == "eval")
