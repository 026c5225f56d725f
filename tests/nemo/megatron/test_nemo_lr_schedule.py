"""The learning rate as trlX's NeMo trainers set it: NeMo's CosineAnnealing (the YAML's
``optim.sched`` for ILQL and SFT, ``scheduler.name: CosineAnnealing`` for PPO) step by step,
the YAML's optimizer for ILQL and SFT, and ``trainer.max_steps`` ending ILQL and SFT runs."""

import math
from pathlib import Path

import pytest
import torch

from rlkit_core.errors import ConfigError
from rlkit_methods import default_ppo_config, default_sft_config
from rlkit_nemo.megatron_config import departures, load_megatron_cfg, translate
from rlkit_nemo.optim import LRSchedule, cosine_annealing_lr, cosine_settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "trlx_nemo_configs"
TRLX_YAMLS = ("megatron_1.3b.yaml", "megatron_2b.yaml", "megatron_20b.yaml", "megatron_65b.yaml",
              "sft_megatron_20b.yaml", "megatron_llama_cfg.yaml")


def nemo_formula(step, lr, max_steps, warmup, constant, min_lr):
    """NeMo's CosineAnnealing written out (nemo/core/optim/lr_scheduler.py: WarmupAnnealHoldPolicy.get_lr,
    CosineAnnealing._get_lr, _cosine_annealing, _linear_warmup_with_cosine_annealing)."""
    decay = max_steps - (constant + warmup)

    def megatron(s):
        if warmup > 0 and s <= warmup:
            return lr * s / warmup
        if s > warmup + decay:
            return min_lr
        return min_lr + (lr - min_lr) * 0.5 * (math.cos(math.pi * (s - warmup) / decay) + 1.0)

    if warmup > 0 and step <= warmup:
        return megatron(step) if constant > 0 else lr * (step + 1) / (warmup + 1)
    if constant > 0 and warmup + decay < step <= max_steps:
        return megatron(step)
    if step > max_steps:
        return min_lr
    if constant > 0:
        return megatron(step)
    return (lr - min_lr) * 0.5 * (1 + math.cos(math.pi * (step - warmup) / (max_steps - warmup))) + min_lr


def rates(schedule, steps):
    """The rate of each optimizer update 0..steps-1, as the engine steps its schedule."""
    out = []
    for _ in range(steps):
        out.append(schedule.get_last_lr()[0])
        schedule.step()
    return out


def schedule(config, megatron):
    holder = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.0)  # stands for Megatron's optimizer
    return LRSchedule(config, holder, megatron)


def sft(total_steps=50):
    return default_sft_config().evolve(train=dict(total_steps=total_steps))


def test_the_formula_by_hand():
    # warmup 2 then cosine to 0.1 over steps 2..10 (no constant_steps): NeMo's (step + 1) / (warmup + 1) warmup
    got = [cosine_annealing_lr(s, base_lr=1.0, max_steps=10, warmup_steps=2, min_lr=0.1) for s in (0, 1, 2, 6, 10, 11)]
    assert got == pytest.approx([1 / 3, 2 / 3, 1.0, 0.55, 0.1, 0.1], abs=1e-12)
    # constant_steps 3: Megatron's step / warmup warmup, the cosine over 10 - 2 - 3 = 5 steps, min_lr held after
    got = [cosine_annealing_lr(s, base_lr=1.0, max_steps=10, warmup_steps=2, constant_steps=3, min_lr=0.1)
           for s in (0, 1, 2, 4, 7, 8, 10, 12)]
    want = [0.0, 0.5, 1.0, 0.1 + 0.45 * (1 + math.cos(0.4 * math.pi)), 0.1, 0.1, 0.1, 0.1]
    assert got == pytest.approx(want, abs=1e-12)


def test_ratios_and_the_horizon_as_nemo_reads_them():
    got = cosine_settings(dict(warmup_ratio=0.1, constant_ratio=0.25, min_lr=0.1), lr=1.0, horizon=20, where="w")
    assert got == dict(max_steps=20, warmup_steps=2, constant_steps=5, min_lr=0.1)
    got = cosine_settings(dict(warmup_steps=3, constant_steps=1e12, max_steps=-1), lr=1.0, horizon=7, where="w")
    assert got == dict(max_steps=7, warmup_steps=3, constant_steps=10**12, min_lr=0.0)


@pytest.mark.parametrize("warmup, constant, min_lr", [(0, 0, 0.0), (3, 0, 1e-4), (0, 5, 1e-4), (4, 6, 2e-4),
                                                      (0, 10**8, 5e-4), (5, 100, 1e-4)])
def test_cosine_annealing_is_nemos_step_by_step(warmup, constant, min_lr):
    from nemo.core.optim.lr_scheduler import CosineAnnealing as NemoCosine

    lr, max_steps = 1e-3, 24
    config = default_ppo_config().evolve(train=dict(total_steps=max_steps), optimizer=dict(kwargs=dict(lr=lr)),
                                         scheduler=dict(name="CosineAnnealing"))
    # as trlX's NeMo PPO examples set it (evolve would keep the default's T_max beside them)
    config.scheduler.kwargs = dict(warmup_steps=warmup, constant_steps=constant, min_lr=min_lr)
    ours = rates(schedule(config, translate(str(FIXTURES / "megatron_1.3b.yaml"), cpu=True, quiet=True)), max_steps + 6)
    written = [nemo_formula(s, lr, max_steps, warmup, constant, min_lr) for s in range(max_steps + 6)]
    shadow = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)
    theirs = NemoCosine(shadow, max_steps=max_steps, warmup_steps=warmup, constant_steps=constant, min_lr=min_lr)
    nemo = []
    for _ in range(max_steps + 6):
        nemo.append(theirs.get_last_lr()[0])
        shadow.step()
        theirs.step()
    assert ours == pytest.approx(written, rel=1e-12, abs=1e-15)
    assert ours == pytest.approx(nemo, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("name", TRLX_YAMLS)
def test_each_trlx_yaml_sched_sets_the_sft_rate_as_nemo_did(name):
    raw = load_megatron_cfg(str(FIXTURES / name))
    sched, trainer = raw["model"]["optim"]["sched"], raw["trainer"]
    max_steps = int(sched.get("max_steps", trainer["max_steps"]))  # NeMo fills it from trainer.max_steps
    lr, warmup, constant = float(raw["model"]["optim"]["lr"]), int(sched.get("warmup_steps", 0)), int(sched.get("constant_steps", 0))
    ours = rates(schedule(sft(), translate(raw, cpu=True, quiet=True)), max_steps + 3)
    want = [nemo_formula(s, lr, max_steps, warmup, constant, float(sched["min_lr"])) for s in range(max_steps + 3)]
    assert ours == pytest.approx(want, rel=1e-12, abs=1e-15)
    if name == "megatron_1.3b.yaml":  # constant_steps above max_steps: min_lr from the first step
        assert set(ours) == {5e-5}


def test_ppo_keeps_its_own_scheduler_and_the_yaml_rate_is_unused():
    megatron = translate(str(FIXTURES / "megatron_1.3b.yaml"), cpu=True, quiet=True)
    config = default_ppo_config().evolve(train=dict(total_steps=10), optimizer=dict(kwargs=dict(lr=1e-3)),
                                         scheduler=dict(name="cosine_annealing", kwargs=dict(T_max=10, eta_min=1e-4)))
    got = rates(schedule(config, megatron), 3)
    assert got[0] == 1e-3 and got[1] < 1e-3  # torch's cosine from the config's rate, not the YAML's 5e-5
    lines = departures(megatron, config, "x")
    assert [line.split(":")[0] for line in lines] == ["megatron_cfg.model.optim", "megatron_cfg.trainer.max_steps",
                                                      "megatron_cfg.model.global_batch_size"]


def test_sft_takes_the_yaml_optimizer_and_says_the_configs_is_unused():
    megatron = translate(str(FIXTURES / "sft_megatron_20b.yaml"), cpu=True, quiet=True)
    from rlkit_nemo.optim import optimizer_config

    got = optimizer_config(sft(), megatron["optimizer"])
    assert (got.lr, got.weight_decay, got.adam_beta2, got.decoupled_weight_decay) == (5e-5, 1e-6, 0.95, True)
    raw = load_megatron_cfg(str(FIXTURES / "sft_megatron_20b.yaml"))
    raw["model"]["optim"].update(name="sgd", momentum=0.5)
    got = optimizer_config(sft(), translate(raw, cpu=True, quiet=True)["optimizer"])
    assert (got.optimizer, got.sgd_momentum, got.decoupled_weight_decay) == ("sgd", 0.5, False)
    lines = departures(megatron, sft(total_steps=1000), "x")
    assert [line.split(":")[0] for line in lines] == ["optimizer, scheduler", "megatron_cfg.trainer.max_steps"]
    assert "the run ends after 200 optimizer steps, before train.total_steps (1000)" in lines[1]
    assert "raise train.total_steps" in departures(megatron, sft(total_steps=50), "x")[1]


@pytest.mark.parametrize("where, change, message", [
    ("yaml", dict(name="WarmupAnnealing"), "megatron_cfg.model.optim.sched.name: 'WarmupAnnealing' is not run by the NeMo engine"),
    ("config", dict(warmup=3), "scheduler.kwargs.warmup: not a key of NeMo's CosineAnnealing"),
    ("config", dict(constant_steps=5, min_lr=1e-3), "scheduler.kwargs.min_lr: 0.001 is not below the learning rate 0.001"),
])
def test_a_schedule_the_engine_cannot_run_is_one_line(where, change, message):
    raw = load_megatron_cfg(str(FIXTURES / "megatron_1.3b.yaml"))
    config = default_ppo_config().evolve(optimizer=dict(kwargs=dict(lr=1e-3)), scheduler=dict(name="CosineAnnealing"))
    config.scheduler.kwargs = {}
    if where == "yaml":
        raw["model"]["optim"]["sched"].update(change)
    else:
        config.scheduler.kwargs.update(change)
    with pytest.raises(ConfigError) as err:
        schedule(config, translate(raw, cpu=True, quiet=True))
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


@pytest.mark.slow  # builds an engine and steps it
@pytest.mark.usefixtures("megatron_cpu")
def test_an_sft_engine_steps_at_the_yaml_rate(tmp_path):
    from test_nemo_precision import batch, collate, engine_for, nll, shrunk

    raw = shrunk("sft_megatron_20b.yaml")  # warmup 20, cosine to 5e-6 over 200 steps, lr 5e-5
    engine = engine_for(raw, tmp_path, yaml_lr=False)
    assert engine.optimizer.config.lr == 5e-5 and engine.optimizer.config.adam_beta2 == 0.95
    items = batch(engine.vocab_size)
    # each step reports the rate the next update uses
    got = [engine.step("tokens", items, collate, nll)["learning_rate_group_0"] for _ in range(3)]
    assert got == pytest.approx([nemo_formula(s, 5e-5, 200, 20, 0, 5e-6) for s in (1, 2, 3)], rel=1e-12)
    inner = getattr(engine.optimizer, "chained_optimizers", [engine.optimizer])
    assert {group["lr"] for opt in inner for group in opt.param_groups} == {got[-1]}


@pytest.mark.slow  # trains
@pytest.mark.usefixtures("megatron_cpu")
def test_trainer_max_steps_ends_an_sft_run_and_not_a_ppo_one(tmp_path):
    import nemo_walks
    from rlkit_nemo.engine import MegatronEngine

    def yaml_with(max_steps):
        cfg = nemo_walks.megatron_cfg()
        cfg["trainer"]["max_steps"] = max_steps
        return cfg

    ppo = nemo_walks.config("ppo", tmp_path / "ppo")
    ppo.train.trainer_kwargs = dict(megatron_cfg=yaml_with(2))
    MegatronEngine(ppo, megatron_cfg=yaml_with(2), pretrained_model="x")
    assert ppo.train.total_steps == 4  # trlX's NeMoPPOTrainer replaced max_steps by the run's length
    trainer = nemo_walks.run("sft", tmp_path / "sft", config_overrides=dict(
        train=dict(trainer_kwargs=dict(megatron_cfg=yaml_with(3)))))
    assert trainer.iter_count == 3 and trainer.config.train.total_steps == 3  # not the config's 4
