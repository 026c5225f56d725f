"""``SFTConfig``: trlX's supervised fine-tuning method section (torch-free module)."""

from __future__ import annotations

from typing import Any

import attrs

from rlkit_core.config import MethodConfig, TRLConfig

from rlkit_methods.common.defaults import trlx_default_config


@attrs.define
class SFTConfig(MethodConfig):
    """Supervised fine-tuning: cross-entropy on the output tokens.

    :param gen_kwargs: generation kwargs used at evaluation
    """

    name: str = "SFTConfig"
    gen_kwargs: dict[str, Any] = attrs.field(
        factory=lambda: dict(max_new_tokens=40, top_k=0, top_p=1.0, do_sample=True)
    )


def default_sft_config() -> TRLConfig:
    """trlX's ``default_sft_config`` (model: the offline SmolLM2-135M source)."""
    return trlx_default_config(
        SFTConfig(name="sftconfig", gen_kwargs=dict(max_new_tokens=40, top_k=0, top_p=1.0, do_sample=True)),
        trainer="AccelerateSFTTrainer", seq_length=1024, batch_size=8, total_steps=1000,
        checkpoint_interval=10000, lr=1.0e-4,
    )
