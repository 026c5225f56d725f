"""rlkit's GRPO/RLOO losses and advantages against TRL 1.16's own code, on the same inputs.

    bench/.venv-trl-grpo/bin/python bench/grpo_losses_vs_trl.py [--seed 0]

Runs in the GRPO peer's venv (``bench/run.py --cases grpo`` creates it; TRL 1.16.0, no
rlkit there). rlkit's side is ``plugins/rlkit_methods/rlkit_methods/grpo/losses.py``, loaded
by file with the KL estimators it imports (``common/kl.py``; both need only torch). TRL's side is TRL's trainers themselves, built on a tiny
Llama saved to a temporary folder with ByT5's byte tokenizer (no files from a hub):

* losses: ``GRPOTrainer.training_step`` / ``RLOOTrainer.training_step`` (their ``_compute_loss``
  and the HF Trainer's scaling for gradient accumulation) on random inputs, with the
  trainer's ``_get_per_token_logps_and_entropies`` answering the random policy
  log-probs (a leaf tensor, so the gradient is compared too); every ``loss_type``, beta 0
  and > 0, ``epsilon_high != epsilon``, one micro-batch and two (gradient accumulation 2);
* advantages: ``_generate_and_score_completions`` (TRL generates with the tiny model, then
  scores with a reward function that returns preset rewards, one group of equal rewards),
  for ``scale_rewards`` group/batch/none (GRPO) and RLOO's leave-one-out with and without
  ``normalize_advantages`` and with its KL-in-the-reward (preset log-probs, beta > 0).

Prints the max absolute differences; exits 1 if any exceeds the tolerance.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path

import torch

LOSSES = Path(__file__).resolve().parents[1] / "plugins" / "rlkit_methods" / "rlkit_methods" / "grpo" / "losses.py"
LOSS_TOL = 1e-9  # float64 inputs: only rounding may differ
ADV_TOL = 1e-5  # float32 rewards, as both sides compute advantages
G, B, T, MAX_LEN = 3, 6, 8, 10  # group size, rows, padded completion width, max_completion_length (> T: dr_grpo)


def load_file(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or not path.is_file():
        raise SystemExit(f"grpo_losses_vs_trl: {path} not found; run from an rlkit checkout")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def rlkit_losses():
    # losses.py imports the estimators as rlkit_methods.common.kl: the file, without the package
    load_file("rlkit_methods.common.kl", LOSSES.parents[1] / "common" / "kl.py")
    return load_file("rlkit_grpo_losses", LOSSES)


def tiny_model(folder: Path) -> str:
    """A 1-block Llama over ByT5's byte vocabulary, saved with its tokenizer (TRL loads the
    reference from the policy's folder)."""
    from transformers import ByT5Tokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = ByT5Tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64, bos_token_id=None,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


class PresetReward:
    """A TRL reward function returning the rewards set on it, in row order."""

    __name__ = "preset"

    def __init__(self) -> None:
        self.rewards: list[float] = []

    def __call__(self, prompts, completions, **kwargs) -> list[float]:
        assert len(completions) == len(self.rewards), (len(completions), len(self.rewards))
        return list(self.rewards)


def trl_trainer(method: str, model: str, reward: PresetReward, **fields):
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer, RLOOConfig, RLOOTrainer

    config_cls, trainer_cls = (GRPOConfig, GRPOTrainer) if method == "grpo" else (RLOOConfig, RLOOTrainer)
    args = config_cls(output_dir=tempfile.mkdtemp(prefix="trl-losses-"), report_to="none", use_cpu=True, bf16=False,
                      gradient_checkpointing=False, save_strategy="no", logging_strategy="no", disable_tqdm=True,
                      num_generations=G, max_completion_length=MAX_LEN, **fields)
    trainer = trainer_cls(model=model, reward_funcs=reward, args=args, processing_class=AutoTokenizer.from_pretrained(model),
                          train_dataset=Dataset.from_dict({"prompt": ["ab", "cd", "ef", "gh"]}))
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = args.gradient_accumulation_steps  # set by Trainer.train() otherwise
    return trainer


def random_batch(gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Right-padded completions of lengths 1..T (one full), log-probs of the policy, pi_old
    (ratios around 1, some clipped) and the reference, one advantage per row (float64)."""
    lengths = torch.randint(1, T + 1, (B,), generator=gen)
    lengths[0] = T
    mask = (torch.arange(T) < lengths[:, None]).long()  # (B, T)
    logps = -3 * torch.rand(B, T, generator=gen, dtype=torch.float64)
    return {"mask": mask, "logps": logps, "old": logps + 0.3 * torch.randn(B, T, generator=gen, dtype=torch.float64),
            "ref": logps + 0.5 * torch.randn(B, T, generator=gen, dtype=torch.float64),
            "adv": torch.randn(B, generator=gen, dtype=torch.float64)}


def trl_inputs(x: dict, rows: slice, beta: float, method: str) -> dict[str, torch.Tensor]:
    mask = x["mask"][rows]
    n = mask.shape[0]
    inputs = {"prompt_ids": torch.zeros(n, 2, dtype=torch.long), "prompt_mask": torch.ones(n, 2, dtype=torch.long),
              "completion_ids": torch.zeros_like(mask), "completion_mask": mask, "advantages": x["adv"][rows],
              "num_items_in_batch": x["mask"].sum()}  # the whole generation batch's tokens (TRL's dapo)
    if method == "grpo":
        inputs["old_per_token_logps"] = x["old"][rows]
        if beta:
            inputs["ref_per_token_logps"] = x["ref"][rows]
    else:
        inputs["old_logps"] = (x["old"][rows] * mask).sum(1)
    return inputs


def trl_loss(trainer, x: dict, micro: list[slice], beta: float, method: str) -> tuple[float, torch.Tensor]:
    """TRL's ``training_step`` over each micro-batch (its ``_compute_loss``, the HF Trainer's
    scaling for gradient accumulation and backward): the summed losses, which accumulate into
    one optimizer step, and the gradient with respect to the policy log-probs."""
    leaf = x["logps"].clone().requires_grad_(True)
    trainer._prepare_inputs = lambda inputs: inputs  # the batch is given here, not generated
    total = 0.0
    for rows in micro:
        part = leaf[rows]
        trainer._get_per_token_logps_and_entropies = lambda *a, _p=part, **k: (_p, torch.zeros_like(_p.detach()), None)
        inputs = trl_inputs(x, rows, beta, method)
        total += trainer.training_step(trainer.model, inputs, inputs["num_items_in_batch"]).item()
    return total, leaf.grad


def rlkit_loss(L, x: dict, micro: list[slice], method: str, **kw) -> tuple[float, torch.Tensor]:
    """rlkit's losses, each micro-batch weighted by its share of the step's rows (as the
    engine's ``step`` weighs them)."""
    leaf = x["logps"].clone().requires_grad_(True)
    total = 0.0
    tokens_per_sequence = x["mask"].sum().item() / B
    for rows in micro:
        mask, n = x["mask"][rows], x["mask"][rows].shape[0]
        if method == "grpo":
            extra = {"tokens_per_sequence": tokens_per_sequence} if len(micro) > 1 else {}
            loss, _ = L.grpo_loss(leaf[rows], x["old"][rows], x["ref"][rows] if kw["beta"] else None, x["adv"][rows], mask,
                                  max_completion_length=MAX_LEN, **kw, **extra)
        else:
            loss, _ = L.rloo_loss(leaf[rows], x["old"][rows], x["adv"][rows], mask, epsilon=kw["epsilon"],
                                  epsilon_high=kw["epsilon_high"])
        loss = loss * n / B
        loss.backward()
        total += loss.item()
    return total, leaf.grad


def compare_losses(L, model: str, seed: int) -> list[tuple[str, float, float, float]]:
    rows = []
    gen = torch.Generator().manual_seed(seed)
    # GRPO with beta > 0 both ways of TRL's use_bias_correction_kl (default True); None: not a GRPO KL setting
    settings = [(m, lt, beta, bias) for m, lt in [("grpo", t) for t in ("grpo", "dr_grpo", "dapo", "bnpo")] + [("rloo", "rloo")]
                for beta in (0.0, 0.04) for bias in ((True, False) if m == "grpo" and beta else (None,))]
    for method, loss_type, beta, bias in settings:
        for accumulation in (1, 2):
            eps, eps_high = 0.2, 0.28
            fields = dict(beta=beta, epsilon=eps, epsilon_high=eps_high, per_device_train_batch_size=B // accumulation,
                          gradient_accumulation_steps=accumulation)
            if method == "grpo":
                fields["loss_type"] = loss_type
            if bias is not None:
                fields["use_bias_correction_kl"] = bias
            trainer = trl_trainer(method, model, PresetReward(), **fields)
            x = random_batch(gen)
            micro = [slice(k * B // accumulation, (k + 1) * B // accumulation) for k in range(accumulation)]
            theirs, their_grad = trl_loss(trainer, x, micro, beta, method)
            kw = dict(beta=beta, epsilon=eps, epsilon_high=eps_high) if method == "rloo" else \
                dict(beta=beta, epsilon=eps, epsilon_high=eps_high, loss_type=loss_type)
            if bias is not None:
                kw["bias_correction_kl"] = bias
            ours, our_grad = rlkit_loss(L, x, micro, method, **kw)
            kl = "" if bias is None else f" bias_kl={bias!s:5}"
            name = f"{method:4} loss_type={loss_type:7} beta={beta:<4}{kl} eps={eps}/{eps_high} micro-batches={accumulation}"
            rows.append((name, abs(theirs - ours), (their_grad - our_grad).abs().max().item(), theirs))
    return rows


def preset_logps(values: dict):
    """A stand-in for ``_get_per_token_logps_and_entropies``: fixed random log-probs per model
    (the policy's pi_old and the reference's), sized by the call."""

    def answer(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        key = "ref" if model is values["ref_model"] else "old"
        if key not in values:
            g = torch.Generator().manual_seed(1 if key == "old" else 2)
            values[key] = -3 * torch.rand(input_ids.shape[0], logits_to_keep, generator=g)
        return values[key], None, None

    return answer


def group_inputs(rewards: list[float]) -> list[dict]:
    return [{"prompt": p} for p in ("ab", "cd", "ef")[: len(rewards) // G] for _ in range(G)]


def compare_advantages(L, model: str, seed: int) -> list[tuple[str, float, float, float]]:
    gen = torch.Generator().manual_seed(seed + 1)
    rewards = torch.randn(3 * G, generator=gen)
    rewards[2 * G:] = 0.7  # a group whose rewards are all equal (std 0)
    rows = []
    for scale in ("group", "batch", "none"):
        reward = PresetReward()
        reward.rewards = rewards.tolist()
        trainer = trl_trainer("grpo", model, reward, beta=0.0, scale_rewards=scale, per_device_train_batch_size=3 * G)
        theirs = trainer._generate_and_score_completions(group_inputs(reward.rewards))["advantages"]
        ours = L.group_advantages(rewards, G, scale)
        rows.append((f"grpo advantages scale_rewards={scale}", (theirs - ours).abs().max().item(), float("nan"), theirs.abs().max().item()))
    for normalize in (False, True):
        for beta in (0.0, 0.05):
            reward = PresetReward()
            reward.rewards = rewards.tolist()
            trainer = trl_trainer("rloo", model, reward, beta=beta, normalize_advantages=normalize, per_device_train_batch_size=3 * G)
            values = {"ref_model": trainer.ref_model}
            if beta:
                trainer._get_per_token_logps_and_entropies = preset_logps(values)
            out = trainer._generate_and_score_completions(group_inputs(reward.rewards))
            scored = rewards
            if beta:
                mask = out["completion_mask"].to(values["old"].dtype)
                scored, _ = L.rloo_kl_rewards(rewards, values["old"], values["ref"], mask, beta)
            ours = L.rloo_advantages(scored, G, normalize)
            rows.append((f"rloo advantages normalize_advantages={normalize} beta={beta}",
                         (out["advantages"] - ours).abs().max().item(), float("nan"), out["advantages"].abs().max().item()))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    import trl

    L = rlkit_losses()
    with tempfile.TemporaryDirectory(prefix="trl-tiny-") as folder:
        model = tiny_model(Path(folder))
        losses = compare_losses(L, model, args.seed)
        advantages = compare_advantages(L, model, args.seed)
    print(f"TRL {trl.__version__}, torch {torch.__version__}; rlkit: {LOSSES.relative_to(LOSSES.parents[4])}; "
          f"G={G}, rows={B}, width {T}, max_completion_length {MAX_LEN}, seed {args.seed}")
    print(f"{'case':85} {'max |loss diff|':>16} {'max |grad diff|':>16} {'TRL value':>12}")
    failed = []
    for name, diff, grad, value in losses + advantages:
        tol = ADV_TOL if "advantages" in name else LOSS_TOL
        bad = not (diff <= tol and (grad != grad or grad <= tol))  # grad NaN: not compared
        failed += [name] if bad else []
        grad_text = "-" if grad != grad else f"{grad:.1e}"
        print(f"{name:85} {diff:16.1e} {grad_text:>16} {value:12.5f}{'  DIFFERS' if bad else ''}")
    print(f"{len(losses) + len(advantages) - len(failed)}/{len(losses) + len(advantages)} equal "
          f"(losses and gradients within {LOSS_TOL:g}, advantages within {ADV_TOL:g})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
