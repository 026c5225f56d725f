"""Bench worker (peer): TRL 1.16's ``RewardTrainer`` or ``DPOTrainer`` on the same model,
pairs, batch and settings as ``prefs_rlkit.py``.

    python bench/prefs_trl.py --spec spec.json --out result.json --variant reward-trl|dpo-trl|losses

Runs in ``bench/.venv-trl-grpo`` (no rlkit there; offline: the model is the folder the runner
resolved). ``reward-trl`` / ``dpo-trl``: ``max_steps`` optimizer steps of
``per_device_train_batch_size`` pairs, one micro-batch each; a step is the CPU time between
consecutive ``on_step_end`` callbacks (the first from ``on_train_begin``): the HF Trainer's
whole loop, collation included. TRL at its defaults except ``bf16`` and
``gradient_checkpointing`` (TRL turns both on; off here: fp32 like rlkit's side, and TRL's
fastest step): the DPO reference is a second full model loaded from the same folder, the
reward model ``AutoModelForSequenceClassification`` with a fresh score head.

The reward model gets the pairs as token ids (TRL's pre-tokenized ``chosen_ids`` /
``rejected_ids`` path): prompt and completion tokenized apart, no EOS, as rlkit's store does.
From text, TRL appends EOS, and with SmolLM2's pad token equal to EOS the sequence classifier
then reads the reward one token before it (the EOS counts as padding).

``losses``: TRL's ``compute_loss`` on one batch of every pair at the weights of
``prefs_common`` (DPO: the policy's top blocks perturbed, the reference as loaded; reward: the
score head ``score_weight``), for each of ``prefs_common.LOSS_SETTINGS``; the DPO log-ratio
differences h per pair are recorded from TRL's own ``F.logsigmoid`` call.
"""

from __future__ import annotations

import tempfile
import time

from harness import peak_rss_bytes, read_spec, setup_torch, worker_args, write_result
from prefs_common import LOSS_SETTINGS, cdpo_loss, perturb_top, score_weight, split_variant, step_median


def trl_fields(spec: dict, method: str, output_dir: str, **fields) -> dict:
    """TRL's config fields for the case (the same settings as ``prefs_rlkit.prefs_config``)."""
    p = spec["prefs"]
    base = dict(output_dir=output_dir, report_to="none", save_strategy="no", logging_strategy="no", disable_tqdm=True,
                seed=spec["seed"], use_cpu=spec["device"] == "cpu", bf16=False, gradient_checkpointing=False,
                per_device_train_batch_size=p["batch_pairs"], gradient_accumulation_steps=1, max_steps=p["steps"],
                learning_rate=p["lr"], adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, weight_decay=0.0,
                max_grad_norm=1.0, dataloader_num_workers=0, max_length=p["max_length"])
    if method == "dpo":
        base.update(beta=p["beta"], loss_type=p["loss_type"])
    return {**base, **fields}


def trl_config(spec: dict, method: str, output_dir: str, **fields):
    from trl import DPOConfig, RewardConfig

    return (DPOConfig if method == "dpo" else RewardConfig)(**trl_fields(spec, method, output_dir, **fields))


def tokenizer_of(spec: dict):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(spec["model"])
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token  # rlkit's rule, for the same padding
    return tokenizer


def reward_rows(pairs: list[dict], tokenizer, margin: bool) -> dict[str, list]:
    """TRL's pre-tokenized reward columns: prompt ids + completion ids, no EOS (rlkit's rule)."""
    def ids(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False).input_ids)

    rows = {"chosen_ids": [ids(p["prompt"]) + ids(p["chosen"]) for p in pairs],
            "rejected_ids": [ids(p["prompt"]) + ids(p["rejected"]) for p in pairs]}
    if margin:
        rows["margin"] = [float(p["margin"]) for p in pairs]
    return rows


def dpo_rows(pairs: list[dict]) -> dict[str, list]:
    return {k: [p[k] for p in pairs] for k in ("prompt", "chosen", "rejected")}


def build(spec: dict, method: str, pairs: list[dict], *, model=None, ref_model=None, margin: bool = False, **fields):
    """The TRL trainer on ``pairs`` (the model loaded by TRL from the folder unless given)."""
    from datasets import Dataset
    from trl import DPOTrainer, RewardTrainer

    tokenizer = tokenizer_of(spec)
    args = trl_config(spec, method, tempfile.mkdtemp(prefix="trl-prefs-"), **fields)
    if method == "dpo":
        return DPOTrainer(model=model or spec["model"], ref_model=ref_model, args=args, processing_class=tokenizer,
                          train_dataset=Dataset.from_dict(dpo_rows(pairs)))
    return RewardTrainer(model=model or spec["model"], args=args, processing_class=tokenizer,
                         train_dataset=Dataset.from_dict(reward_rows(pairs, tokenizer, margin)))


def run_steps(spec: dict, method: str, torch) -> dict:
    from transformers import TrainerCallback

    p = spec["prefs"]
    pairs = p["pairs"][: p["batch_pairs"] * p["steps"]]
    start = time.process_time()
    trainer = build(spec, method, pairs, margin=method == "reward")
    load_s = time.process_time() - start
    marks: list[float] = []
    losses: list[float] = []

    class StepClock(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            marks.append(time.process_time())

        def on_step_end(self, args, state, control, **kwargs):
            marks.append(time.process_time())

    trainer.add_callback(StepClock())
    compute_loss = trainer.compute_loss

    def recorded(*a, **k):
        loss = compute_loss(*a, **k)
        losses.append(float(loss.detach()))
        return loss

    trainer.compute_loss = recorded
    peaks = {"load": peak_rss_bytes()}
    trainer.train()
    peaks["train"] = peak_rss_bytes()
    steps = [b - a for a, b in zip(marks, marks[1:])]
    model = trainer.model
    return {"step_s": step_median(steps), "steps_s": steps, "load_s": load_s, "optimizer_steps": len(steps),
            "losses": losses, "peak_rss_after": peaks, "reference": "separate model" if getattr(trainer, "ref_model", None) is not None else None,
            "trainable_params": sum(q.numel() for q in model.parameters() if q.requires_grad),
            "trainer": type(trainer).__name__}


class RecordLogSigmoid:
    """``torch.nn.functional`` for TRL's DPO module with ``logsigmoid`` recording its argument
    (the sigmoid loss calls it once, on beta * h)."""

    def __init__(self, functional):
        self.functional, self.args = functional, []

    def __getattr__(self, name):
        return getattr(self.functional, name)

    def logsigmoid(self, x, *a, **k):
        self.args.append(x.detach().clone())
        return self.functional.logsigmoid(x, *a, **k)


def check_losses(spec: dict, torch) -> dict:
    """TRL's loss for every setting on one batch of all the check's pairs."""
    import trl.trainer.dpo_trainer as dpo_module
    from transformers import AutoModelForCausalLM

    pairs = spec["prefs"]["check_pairs"]
    out = {"losses": {}, "tokens": {}}
    for name, method, fields in LOSS_SETTINGS:
        fields = dict(fields)
        margin = fields.pop("margin", False)
        if method == "dpo":
            policy = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=torch.float32)
            perturb_top(policy.model.layers)
            ref = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=torch.float32)
            smoothing = fields.get("label_smoothing", 0.0)
            trainer = build(spec, method, pairs, model=policy, ref_model=ref, per_device_train_batch_size=len(pairs), **fields)
            rows = trainer.train_dataset
            out["tokens"]["dpo"] = [[r["prompt_ids"], r["chosen_ids"], r["rejected_ids"]] for r in rows]
        else:
            trainer = build(spec, method, pairs, margin=margin, per_device_train_batch_size=len(pairs), **fields)
            with torch.no_grad():
                trainer.model.score.weight.copy_(score_weight(trainer.model.config.hidden_size))
            out["tokens"]["reward"] = [[r["chosen_ids"], r["rejected_ids"]] for r in trainer.train_dataset]
        batch = next(iter(trainer.get_train_dataloader()))
        trainer.model.train()
        recorder = RecordLogSigmoid(dpo_module.F)
        dpo_module.F = recorder
        try:
            loss = float(trainer.compute_loss(trainer.model, batch).detach())
        finally:
            dpo_module.F = recorder.functional
        entry = {"loss": loss, "batch_rows": int(batch["input_ids"].shape[0])}
        if method == "dpo" and fields.get("loss_type") == "sigmoid":
            deltas = (recorder.args[0] / fields["beta"]).tolist()
            entry["h"] = sorted(deltas)
            if smoothing:  # TRL 1.16's sigmoid ignores label_smoothing: cDPO on TRL's own h
                entry["trl_sigmoid_loss"], entry["loss"] = loss, cdpo_loss(deltas, fields["beta"], smoothing)
        out["losses"][name] = entry
    return out


def main() -> None:
    args = worker_args(__doc__.splitlines()[0])
    spec = read_spec(args.spec)
    torch, _, _ = setup_torch(spec)
    import transformers
    import trl

    if args.variant == "losses":
        result = check_losses(spec, torch)
    else:
        method, _ = split_variant(args.variant, {"trl": None})
        result = run_steps(spec, method, torch)
    write_result(args.out, {**result, "clock": "cpu", "torch": torch.__version__, "trl": trl.__version__,
                            "transformers": transformers.__version__})


if __name__ == "__main__":
    main()
