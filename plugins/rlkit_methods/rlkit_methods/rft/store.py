"""The RFT store: the selected ``[prompt, output]`` pairs as SFT data (loss on the output
tokens; trlX's RFT also trained on the prompt and on padding)."""

from __future__ import annotations

from typing import Any, Sequence

from rlkit_methods.sft.store import SFTStore, make_sft_experience


def make_rft_store(selected: Sequence[Sequence[str]], tokenizer: Any, max_length: int = 2048) -> SFTStore:
    """``select_samples``' pairs -> an :class:`~rlkit_methods.sft.store.SFTStore`."""
    if not selected:
        raise ValueError("RFT selected no samples; lower start_percentile or raise n_generations_per_prompt")
    return make_sft_experience([list(pair) for pair in selected], tokenizer, max_length)
