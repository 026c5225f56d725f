"""RFT (rlkit_methods, written once) trains randomwalks on the NeMo engine as NeMoRFTTrainer,
the same method the accelerate engine runs as AccelerateRFTTrainer
(tests/accelerate/test_rft_trainer.py): growth steps sample n_generations_per_prompt per
prompt, the epochs train on the selection at their percentile. Tiny GPT on CPU."""

import pytest

import rlkit_core as rlkit
from rlkit_methods.run.metrics_log import read_metrics
from rlkit_methods.rft.config import default_rft_config

import nemo_walks

pytestmark = [pytest.mark.usefixtures("megatron_cpu"), pytest.mark.slow]


def test_rft_trains_on_the_nemo_engine(tmp_path):
    c = default_rft_config().evolve(
        train=dict(seq_length=12, batch_size=8, epochs=100, total_steps=6, checkpoint_interval=100, eval_interval=3,
                   checkpoint_dir=str(tmp_path / "ckpts"), save_best=False, seed=7, trainer="NeMoRFTTrainer",
                   trainer_kwargs=dict(megatron_cfg=nemo_walks.megatron_cfg())),
        model=dict(model_path="unused", num_layers_unfrozen=-1),
        tokenizer=dict(tokenizer_path="byt5"),
        optimizer=dict(kwargs=dict(lr=1e-3)),
        scheduler=dict(kwargs=dict(T_max=1000, eta_min=1e-4)),
        method=dict(n_generations_per_prompt=4, start_percentile=0.5, end_percentile=0.9, n_improve_steps=2,
                    gen_kwargs=dict(max_new_tokens=6, top_k=0, top_p=1.0, do_sample=True)),
    )
    c.model.model_path = nemo_walks.model_config()
    prompts = nemo_walks.TASK.eval_prompts[:8]
    trainer = rlkit.train(config=c, reward_fn=nemo_walks.reward_fn, prompts=prompts, eval_prompts=prompts,
                          metric_fn=nemo_walks.TASK.metric)
    assert type(trainer).__name__ == "NeMoRFTTrainer" and type(trainer.engine).__name__ == "MegatronEngine"
    records = read_metrics(tmp_path / "ckpts" / "logs")
    rollouts = [r for r in records if r["kind"] == "rollout"]
    # n_improve_steps 2: the first epoch samples 8 prompts x 4 outputs, the second re-selects at a higher percentile
    assert [r["rft/pool_size"] for r in rollouts[:2]] == [32, 32]
    assert [r["rft/percentile"] for r in rollouts[:2]] == pytest.approx([0.5, 0.9])
    train = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in train] == list(range(1, 7)) and all(r["loss"] == r["loss"] for r in train)
    assert [r["step"] for r in records if r["kind"] == "eval"] == [0, 3, 6]
    assert len(trainer.store) > 0 and trainer.pool and all(len(v) % 4 == 0 for v in trainer.pool.values())
