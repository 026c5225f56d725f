"""The RFT trainer on the shared loop: growth steps, the percentile schedule, the store of
selected samples, its checkpoint state, and its errors."""

import pytest
import torch
import transformers

import rlkit_core as rlkit
from rlkit_core.config import ModelConfig, OptimizerConfig, SchedulerConfig, TokenizerConfig, TrainConfig, TRLConfig
from rlkit_core.errors import ConfigError
from rlkit_core.loading import get_trainer
from rlkit_methods.rewards.randomwalks import generate_random_walks
from rlkit_methods.rft.config import RFTConfig
from rlkit_methods.rft.selection import select_samples

METRIC, PROMPTS, _, _ = generate_random_walks(seed=1000)


def config(tmp_path, **method):
    settings = dict(n_generations_per_prompt=4, start_percentile=0.5, end_percentile=0.9, n_improve_steps=2,
                    gen_kwargs=dict(max_new_tokens=9, top_k=0, top_p=1.0, do_sample=True))
    settings.update(method)
    return TRLConfig(
        train=TrainConfig(seq_length=11, epochs=100, total_steps=9, batch_size=10, checkpoint_interval=1000,
                          eval_interval=1000, trainer="AccelerateRFTTrainer", checkpoint_dir=str(tmp_path / "ckpts"),
                          save_best=False, seed=3),
        model=ModelConfig(model_path=transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, n_positions=16, vocab_size=23,
                                                             bos_token_id=21, eos_token_id=21, pad_token_id=22)),
        tokenizer=TokenizerConfig(tokenizer_path="randomwalks"),
        optimizer=OptimizerConfig(name="adamw", kwargs=dict(lr=1e-3)),
        scheduler=SchedulerConfig(name="cosine_annealing", kwargs=dict(T_max=1000, eta_min=1e-3)),
        method=RFTConfig(**settings),
    )


def reward(samples, **kwargs):
    return METRIC(samples)["optimality"]


class Rollouts:
    def __init__(self):
        self.stats = []

    @rlkit.hookimpl
    def rlkit_rollouts_made(self, trainer, step, num_rollouts, stats, is_main_process):
        self.stats.append(dict(stats, store=num_rollouts))


@pytest.mark.slow
def test_rft_grows_the_pool_on_growth_steps_and_raises_the_percentile(tmp_path, rlkit_host):
    seen = Rollouts()
    trainer = rlkit.train(reward_fn=reward, prompts=PROMPTS[:5], eval_prompts=PROMPTS[:2], metric_fn=lambda samples, **k: METRIC(samples),
                          config=config(tmp_path), plugins=[seen])
    assert type(trainer) is get_trainer("AccelerateRFTTrainer") and trainer.iter_count == 9
    epochs = seen.stats
    assert len(epochs) >= 4
    # n_improve_steps 2: epochs 0, 2, 4 sample 5 prompts x 4 new outputs; 1, 3 only re-select higher
    assert [e["rft/percentile"] for e in epochs[:4]] == pytest.approx([0.5, 0.9, 0.5, 0.9])
    assert [e["rft/pool_size"] for e in epochs[:4]] == [20, 20, 40, 40]
    assert ["time/rollout_generate" in e for e in epochs[:4]] == [True, False, True, False]
    # the store is exactly the selection of the current epoch, all at or above its prompt's threshold
    selected, thresholds = select_samples(trainer.pool, trainer.config.method.percentile(trainer.epoch_count))
    assert len(trainer.store) == len(selected) == epochs[-1]["store"]
    by_prompt = dict(zip(trainer.pool, thresholds))
    scores = {(p, o): s for p, samples in trainer.pool.items() for o, s in samples}
    assert all(scores[(p, o)] >= by_prompt[p] for p, o in selected)


@pytest.mark.slow
def test_rft_checkpoint_state_rebuilds_the_same_store_without_pickle(tmp_path, rlkit_host):
    trainer = rlkit.train(reward_fn=reward, prompts=PROMPTS[:5], config=config(tmp_path, n_improve_steps=3).evolve(
        train=dict(total_steps=3)))
    torch.save(trainer.method_state(), tmp_path / "state.pt")
    state = torch.load(tmp_path / "state.pt", weights_only=True)
    store = [item["input_ids"].tolist() for item in trainer.store]
    trainer.store, trainer.pool = None, {}
    trainer.load_method_state(state)
    assert [item["input_ids"].tolist() for item in trainer.store] == store
    assert trainer.epoch_count == state["epoch_count"]


def test_rft_needs_a_reward_and_a_causal_model(tmp_path, rlkit_host):
    trainer_cls = get_trainer("AccelerateRFTTrainer")
    trainer = trainer_cls(config(tmp_path))
    with pytest.raises(ConfigError, match="reward: RFT needs a reward function"):
        trainer.make_experience()
    t5 = config(tmp_path / "t5").evolve(model=dict(model_arch_type="seq2seq"))
    t5.model.model_path = transformers.T5Config(num_layers=1, d_model=16, d_ff=32, num_heads=2, d_kv=8, vocab_size=23,
                                                decoder_start_token_id=22, pad_token_id=22, eos_token_id=21)
    with pytest.raises(ConfigError, match="model.model_arch_type: RFT trains causal LMs"):
        trainer_cls(t5)
