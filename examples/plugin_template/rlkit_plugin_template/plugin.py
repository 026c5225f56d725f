"""The module the entry point names. rlkit imports it when it lists or loads plugins, so it
imports nothing heavy: the reward and the source are given as import strings."""

from __future__ import annotations

import logging

from rlkit_core import PipelineSpec, RewardSpec, hookimpl

log = logging.getLogger("rlkit_plugin_template")


@hookimpl
def rlkit_register_rewards():
    return [
        RewardSpec("keyword_count", "rlkit_plugin_template.rewards:keyword_count",
                   description="occurrences of configured keywords in each output"),
    ]


@hookimpl
def rlkit_register_pipelines():
    return [
        PipelineSpec("lines", "rlkit_plugin_template.sources:lines", kind="source",
                     description="prompts from a list (prefix, repeat)"),
    ]


@hookimpl
def rlkit_evaluation_end(step, metrics, is_main_process):
    """An observer: plugins log, they never print."""
    if is_main_process and "reward/mean" in metrics:
        log.info("evaluation at step %d: reward/mean %.3f", step, metrics["reward/mean"])
