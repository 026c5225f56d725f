"""``LoggedPGConfig``: policy gradient from logged (prompt, completion, reward) rows
(torch-free module). Names follow TRL's GRPO/RLOO where the concepts match."""

from __future__ import annotations

from typing import Any, Optional

import attrs

from rlkit_core.config import MethodConfig, TRLConfig, at_least, one_of

from rlkit_methods.common.defaults import number, trlx_default_config

ADVANTAGES = ("grpo", "rloo")  # as rlkit_methods.logged.losses (which imports torch)


@attrs.define
class LoggedPGConfig(MethodConfig):
    """REINFORCE with a group baseline on logged completions, importance-weighted when the
    behaviour policy's log-probs were logged (see ``rlkit_methods.logged.losses`` for the
    math and where it is biased).

    :param advantage: grpo ((r - group mean) / group std) or rloo (r - mean of the other completions)
    :param scale_rewards: grpo only: divide by the group's std (false: Dr. GRPO's plain difference)
    :param importance_sampling_cap: c in min(pi/mu, c) per token (None: no truncation);
        used only when the rows carry ``behaviour_logprobs``
    :param disable_dropout: train without dropout, so that pi/mu compares the policy with itself
        when the rows were logged by it (the weights are then exactly 1)
    :param gen_kwargs: generation kwargs used at evaluation
    """

    name: str = "LoggedPGConfig"
    advantage: str = attrs.field(default="grpo", validator=one_of(*ADVANTAGES))
    scale_rewards: bool = True
    importance_sampling_cap: Optional[float] = attrs.field(default=2.0, validator=number(at_least(1.0)))
    disable_dropout: bool = True
    gen_kwargs: dict[str, Any] = attrs.field(factory=lambda: dict(max_new_tokens=40, top_k=0, top_p=1.0, do_sample=True))


def default_logged_pg_config() -> TRLConfig:
    """trlX's skeleton with GRPO's learning rate (model: the offline SmolLM2-135M source)."""
    return trlx_default_config(LoggedPGConfig(), trainer="AccelerateLoggedPGTrainer", seq_length=1024, batch_size=8,
                               total_steps=10000, checkpoint_interval=10000, lr=1e-6)
