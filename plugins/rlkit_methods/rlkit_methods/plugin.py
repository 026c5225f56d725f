"""Entry point of rlkit-methods (no torch import here: ``rlkit plugins`` must stay light).

Everything heavy is named by an import string ``"module:attribute"``. Every method gives its
trainer, so every registered engine runs it (``AcceleratePPOTrainer``, ``NeMoILQLTrainer``, a
third party's ``<Engine>GRPOTrainer``: :mod:`rlkit_core.pairing`).
"""

from rlkit_core import MethodSpec, PipelineSpec, RewardSpec, hookimpl

_M = "rlkit_methods"


@hookimpl
def rlkit_register_methods():
    return [
        MethodSpec(
            "ppo", f"{_M}.ppo.config:PPOConfig", mode="online", aliases=("PPOConfig",),
            default_config=f"{_M}.ppo.config:default_ppo_config", trainer=f"{_M}.ppo.trainer:PPOTrainer",
            description="PPO against a reward function (clipped policy and value losses, GAE, KL penalty)",
        ),
        MethodSpec(
            "ilql", f"{_M}.ilql.config:ILQLConfig", mode="offline", aliases=("ILQLConfig",),
            default_config=f"{_M}.ilql.config:default_ilql_config", trainer=f"{_M}.ilql.trainer:ILQLTrainer",
            description="ILQL from reward-labelled samples (expectile V, double Q, CQL, AWAC)",
        ),
        MethodSpec(
            "sft", f"{_M}.sft.config:SFTConfig", mode="supervised", aliases=("SFTConfig",),
            default_config=f"{_M}.sft.config:default_sft_config", trainer=f"{_M}.sft.trainer:SFTTrainer",
            description="Supervised fine-tuning on the output tokens",
        ),
        MethodSpec(
            "rft", f"{_M}.rft.config:RFTConfig", mode="online", aliases=("RFTConfig",),
            default_config=f"{_M}.rft.config:default_rft_config", trainer=f"{_M}.rft.trainer:RFTTrainer",
            description="Rejection-sampling fine-tuning: sample, keep each prompt's best-scoring outputs, fine-tune on them",
        ),
        MethodSpec(
            "grpo", f"{_M}.grpo.config:GRPOConfig", mode="online", aliases=("GRPOConfig",),
            default_config=f"{_M}.grpo.config:default_grpo_config", trainer=f"{_M}.grpo.trainer:GRPOTrainer",
            description="GRPO (TRL's fields): groups of samples per prompt, group-relative advantages, clipped ratio, k3 KL",
        ),
        MethodSpec(
            "rloo", f"{_M}.grpo.config:RLOOConfig", mode="online", aliases=("RLOOConfig",),
            default_config=f"{_M}.grpo.config:default_rloo_config", trainer=f"{_M}.grpo.trainer:RLOOTrainer",
            description="RLOO (TRL 1.16's): leave-one-out baseline, KL to the reference in the reward, clipped sample ratio",
        ),
        MethodSpec(
            "dpo", f"{_M}.preferences.config:DPOConfig", mode="supervised", aliases=("DPOConfig",),
            default_config=f"{_M}.preferences.config:default_dpo_config", trainer=f"{_M}.preferences.dpo:DPOTrainer",
            description="DPO (TRL's loss names: sigmoid, ipo, hinge) on preference pairs, no second full model for the reference",
        ),
        MethodSpec(
            "reward_model", f"{_M}.preferences.config:RewardModelConfig", mode="supervised",
            aliases=("RewardModelConfig", "RewardModel", "rm"),
            default_config=f"{_M}.preferences.config:default_reward_model_config",
            trainer=f"{_M}.preferences.reward_model:RewardModelTrainer",
            description="A reward model on preference pairs (Bradley-Terry, optional margin), exported as an HF sequence classifier",
        ),
        MethodSpec(
            "logged_pg", f"{_M}.logged.config:LoggedPGConfig", mode="offline", aliases=("LoggedPGConfig", "LoggedPG"),
            default_config=f"{_M}.logged.config:default_logged_pg_config", trainer=f"{_M}.logged.trainer:LoggedPGTrainer",
            description="Policy gradient from logged (prompt, completion, reward) rows: group or leave-one-out baseline, "
                        "truncated importance weights when behaviour log-probs were logged",
        ),
    ]


@hookimpl
def rlkit_register_pipelines():
    return [
        PipelineSpec("PromptPipeline", f"{_M}.data.prompts:PromptPipeline", kind="prompt",
                     description="trlX's prompt pipeline: tokenized, truncated, left-padded prompts"),
        PipelineSpec("file", f"{_M}.data.sources:file_source", kind="source",
                     description="prompts or samples from .txt, .jsonl or .csv (field/column, reward_field)"),
        PipelineSpec("dataset", f"{_M}.data.hf_datasets:dataset_source", kind="source",
                     description="HF datasets: a local .json/.jsonl/.csv/.parquet/.arrow file or saved folder "
                                 "(path, split, column, reward_column, n); needs rlkit-methods[datasets]"),
        PipelineSpec("preference_pairs", f"{_M}.data.preference_rows:preference_pairs", kind="source",
                     description="preference pairs {prompt, chosen, rejected[, margin]} from .jsonl or an HF data set "
                                 "(.parquet/.csv/saved folder), plain text or chat messages"),
        PipelineSpec("logged_completions", f"{_M}.data.preference_rows:logged_completions", kind="source",
                     description="logged rows {prompt, completion | messages, reward[, behaviour_logprobs]} from .jsonl "
                                 "or an HF data set, plain text or chat messages"),
        PipelineSpec("imdb_prompts", f"{_M}.data.imdb:imdb_prompts", kind="source",
                     description="first words of IMDB reviews (n, words, seed, label, source)"),
        PipelineSpec("imdb_samples", f"{_M}.data.imdb:imdb_samples", kind="source",
                     description="IMDB reviews with their 0/1 labels (or reward: vader, VADER of the output part) "
                                 "as rewards (n, max_words, seed, prompt_words, reward)"),
        PipelineSpec("randomwalks_prompts", f"{_M}.rewards.randomwalks:randomwalks_prompts", kind="source",
                     description="start letters of trlX's randomwalks task (seed, n_nodes, ...)"),
        PipelineSpec("randomwalks_walks", f"{_M}.rewards.randomwalks:randomwalks_walks", kind="source",
                     description="random walks with their optimality as reward (with_rewards=False for SFT, "
                                 "split_prompt=True for [start, rest] pairs)"),
    ]


@hookimpl
def rlkit_register_rewards():
    return [
        RewardSpec("python", f"{_M}.rewards.python:python_function", kind="reward",
                   description="a Python module:function (kwargs: function, plus kwargs bound to each call)"),
        RewardSpec("python_metric", f"{_M}.rewards.python:python_function", kind="metric",
                   description="a Python module:function returning a dict of metric lists"),
        RewardSpec("vader", f"{_M}.rewards.vader:vader_reward", kind="reward",
                   description="VADER compound sentiment of each output, in [-1, 1] (on: outputs|samples)"),
        RewardSpec("sentiment", f"{_M}.rewards.vader:vader_metric", kind="metric",
                   description="VADER compound sentiment as metric 'sentiment'"),
        RewardSpec("reward_model", f"{_M}.rewards.reward_model:reward_model_reward", kind="reward",
                   description="the score of a trained reward model (path: a sequence-classifier folder, batch_size, device)"),
        RewardSpec("randomwalks", f"{_M}.rewards.randomwalks:randomwalks_reward", kind="reward",
                   description="optimality of a walk to the goal node (trlX's randomwalks; seed=1000)"),
        RewardSpec("randomwalks_metric", f"{_M}.rewards.randomwalks:randomwalks_metric", kind="metric",
                   description="randomwalks lengths and optimality"),
    ]


@hookimpl
def rlkit_register_commands(app):
    from pathlib import Path

    import typer

    @app.command("report")
    def report_command(run_dir: Path = typer.Argument(..., help="A run's checkpoint_dir (or its logs folder)."),
                       plot_to: Path = typer.Option(None, "--plot", metavar="FILE",
                                                    help="Where to write the plot (default: report.png in the run's folder).")):
        """Print a run's report (before/after samples, reward, time per phase) and write report.png."""
        from rlkit_methods.run.end_report import report

        report(run_dir, plot_to=plot_to)


@hookimpl
def rlkit_train_end(trainer, error, is_main_process):
    """After a successful run of an rlkit trainer, the report (main process only)."""
    if error is not None or not is_main_process or getattr(trainer, "logging_dir", None) is None:
        return
    from rlkit_methods.run.end_report import report

    report(trainer.logging_dir, checkpoint_dir=getattr(trainer, "checkpoint_dir", None))


@hookimpl
def rlkit_check_config(config):
    """gen_kwargs, optimizer.kwargs and scheduler.kwargs, before a model is loaded."""
    from rlkit_methods.config_checks import check_config

    return check_config(config)
