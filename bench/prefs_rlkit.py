"""Bench worker: rlkit's reward model or DPO through the trainer API, on the same model, pairs,
batch and settings as ``prefs_trl.py``.

    python bench/prefs_rlkit.py --spec spec.json --out result.json --variant reward-all|reward-k2|reward-all-packed|dpo-all|dpo-k2|losses

The trainer is the one ``rlkit_core.train`` would build for ``AccelerateRewardModelTrainer`` /
``AccelerateDPOTrainer``; ``make_experience`` and ``learn`` are its own. A step is the CPU
time between consecutive ``log_fn`` calls (the first from the start of ``learn``): the loop's
whole step, collation and the step's logging included; evaluation and checkpoint writing
are turned off (TRL's side does neither). ``all``: every block trains (DPO: the reference's
log-probs precomputed once before the first step, timed apart as ``ref_precompute_s``);
``k2``: ``num_layers_unfrozen: 2`` (DPO: the hydra reference on the frozen trunk).
``all-packed``: ``all`` with ``train.packing: true`` (a micro-batch's rows packed into bins,
padding-free).

``losses``: the trainer's own loss on one batch of every pair (``train_step`` with lr 0) at
the weights of ``prefs_common``, for each of ``prefs_common.LOSS_SETTINGS``, with both DPO
reference options (precomputed, hydra).
"""

from __future__ import annotations

import tempfile
import time

from harness import peak_rss_bytes, read_spec, setup_torch, worker_args, write_result
from prefs_common import LOSS_SETTINGS, perturb_top, score_weight, split_variant, step_median

VARIANTS = {"all": (-1, False), "k2": (2, False), "all-packed": (-1, True)}  # (model.num_layers_unfrozen, train.packing)


def prefs_config(spec: dict, method: str, num_layers_unfrozen: int, workdir: str, packing: bool = False, **method_fields):
    """The case's settings as an rlkit config (TRL's field names in ``method``)."""
    from rlkit_methods.preferences.config import default_dpo_config, default_reward_model_config

    p = spec["prefs"]
    if method == "dpo":
        base = default_dpo_config()
        fields = dict(beta=p["beta"], loss_type=p["loss_type"], precompute_ref_log_probs=num_layers_unfrozen < 0)
    else:
        base, fields = default_reward_model_config(), dict(eval_fraction=0.0)
    fields.update(method_fields)
    return base.evolve(
        train=dict(seq_length=p["max_length"], batch_size=p["batch_pairs"], minibatch_size=None, epochs=1,
                   total_steps=p["steps"], checkpoint_interval=10**9, eval_interval=10**9, checkpoint_dir=workdir,
                   save_best=False, seed=spec["seed"], tracker=None, max_grad_norm=1.0, packing=packing),
        model=dict(model_path=spec["model"], num_layers_unfrozen=num_layers_unfrozen),
        tokenizer=dict(tokenizer_path=spec["model"]),
        optimizer=dict(kwargs=dict(lr=p["lr"], betas=[0.9, 0.999], eps=1e-8, weight_decay=0.0)),
        method=fields,
    )


def build_trainer(config):
    """The trainer ``rlkit_core.train`` would build for this config."""
    from rlkit_core.api import resolve_trainer
    from rlkit_core.plugins import get_host
    from rlkit_core.registry import load_target

    registry = get_host().registry
    trainer_cls = load_target(resolve_trainer(config, registry.get("method", config.method.name), registry).target, what="trainer")
    return trainer_cls(config=config)


def quiet(trainer) -> None:
    """No evaluation and no files: TRL's side neither evaluates nor saves."""
    trainer.evaluate = lambda: {}
    trainer.save = lambda *a, **k: None
    trainer.save_pretrained = lambda *a, **k: None


def run_steps(spec: dict, method: str, unfrozen: int, packing: bool = False) -> dict:
    p = spec["prefs"]
    pairs = p["pairs"][: p["batch_pairs"] * p["steps"]]
    if method == "reward":
        pairs = [dict(pair) for pair in pairs]  # margins on both sides
    else:
        pairs = [{k: pair[k] for k in ("prompt", "chosen", "rejected")} for pair in pairs]
    start = time.process_time()
    trainer = build_trainer(prefs_config(spec, method, unfrozen, tempfile.mkdtemp(prefix="rlkit-prefs-"), packing=packing))
    trainer.make_experience(pairs, trainer.config.train.seq_length)
    load_s = time.process_time() - start
    quiet(trainer)
    precompute = {"s": 0.0}
    prepare = trainer.prepare_learning

    def timed_prepare():
        begin = time.process_time()
        prepare()
        precompute["s"] = time.process_time() - begin

    trainer.prepare_learning = timed_prepare
    marks: list[float] = []
    losses: list[float] = []

    def log_fn(stats):
        marks.append(time.process_time())
        losses.append(float(stats["loss"]))

    peaks = {"load": peak_rss_bytes()}
    begin = time.process_time()
    trainer.learn(log_fn=log_fn)
    peaks["train"] = peak_rss_bytes()
    steps = [b - a for a, b in zip([begin + precompute["s"], *marks], marks)]
    model = trainer.engine.unwrapped_model
    reference = None
    if method == "dpo":
        reference = "engine (hydra)" if trainer.uses_engine_reference() else "precomputed log-probs"
    return {"step_s": step_median(steps), "steps_s": steps, "load_s": load_s, "ref_precompute_s": precompute["s"],
            "optimizer_steps": len(steps), "losses": losses, "peak_rss_after": peaks, "reference": reference,
            "trainable_params": sum(q.numel() for q in model.parameters() if q.requires_grad),
            "trainer": type(trainer).__name__}


def decoder_layers(trainer):
    model = trainer.engine.unwrapped_model  # rlkit's wrapper (hydra, score head) or the plain HF LM
    return (model.base_model if hasattr(model, "score_rollout") else model).model.layers


def check_losses(spec: dict, torch) -> dict:
    """rlkit's loss for every setting on one batch of all the check's pairs."""
    pairs = spec["prefs"]["check_pairs"]
    out = {"losses": {}, "tokens": {}}
    trainers = {}
    for name, method, fields in LOSS_SETTINGS:
        fields = dict(fields)
        margin = fields.pop("margin", False)
        rows = [dict(p) if margin else {k: p[k] for k in ("prompt", "chosen", "rejected")} for p in pairs]
        options = ("all", "k2") if method == "dpo" else ("all",)
        for option in options:
            key = (method, option)
            if key not in trainers:
                spec_lr0 = {**spec, "prefs": {**spec["prefs"], "lr": 0.0, "batch_pairs": len(pairs)}}
                unfrozen, packing = VARIANTS[option]
                config = prefs_config(spec_lr0, method, unfrozen, tempfile.mkdtemp(prefix="rlkit-prefs-"), packing=packing)
                trainer = build_trainer(config)
                quiet(trainer)
                layers = decoder_layers(trainer)
                initial = [{k: v.clone() for k, v in layer.state_dict().items()} for layer in layers[-2:]]
                trainers[key] = (trainer, initial)
            trainer, initial = trainers[key]
            for k, v in fields.items():
                setattr(trainer.config.method, k, v)
            if method == "reward":
                trainer.config.method.center_rewards_coefficient = fields.get("center_rewards_coefficient")
            trainer.make_experience(rows, trainer.config.train.seq_length)
            layers = decoder_layers(trainer)
            with torch.no_grad():
                for layer, state in zip(layers[-2:], initial):
                    layer.load_state_dict(state)  # the reference's weights: precompute reads them
            trainer.prepare_learning()
            if method == "dpo":
                perturb_top(layers)
            else:
                with torch.no_grad():
                    head = trainer.engine.unwrapped_model.v_head
                    head.weight.copy_(score_weight(head.weight.shape[1]).to(head.weight.dtype))
            stats = trainer.train_step(list(range(len(rows))))
            label = name if method == "reward" else f"{name} [{'precomputed reference' if option == 'all' else 'hydra reference'}]"
            out["losses"][label] = {"loss": float(stats["loss"]), "setting": name, "batch_rows": 2 * len(rows)}
            store = trainer.store.items
            if method == "dpo":
                out["tokens"]["dpo"] = [[it["prompt"], it["chosen"], it["rejected"]] for it in store]
            else:
                out["tokens"]["reward"] = [[it["prompt"] + it["chosen"], it["prompt"] + it["rejected"]] for it in store]
    return out


def main() -> None:
    args = worker_args(__doc__.splitlines()[0])
    spec = read_spec(args.spec)
    torch, _, _ = setup_torch(spec)
    if args.variant == "losses":
        result = check_losses(spec, torch)
    else:
        method, (unfrozen, packing) = split_variant(args.variant, VARIANTS)
        result = run_steps(spec, method, unfrozen, packing)
    write_result(args.out, {**result, "clock": "cpu", "torch": torch.__version__})


if __name__ == "__main__":
    main()
