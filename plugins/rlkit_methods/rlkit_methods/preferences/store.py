"""Preference pairs as token ids, collated for the engine's ``response`` forward.

A batch of B pairs is 2B rows: each pair's chosen completion, then its rejected one, each after
its prompt (prompts left-padded, completions right-padded, positions following the real tokens).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch.utils.data import Dataset

from rlkit_methods.data.completions import prompt_completion_ids, truncate
from rlkit_methods.data.padding import pad, position_ids_from_mask
from rlkit_methods.data.preference_rows import check_pair


def response_batch(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], pad_id: int,
                   extra_column: bool = False) -> dict[str, torch.Tensor]:
    """``query_tensors`` (N, Q) left-padded, ``response_tensors`` (N, R) right-padded,
    ``attention_mask`` and ``position_ids`` (N, Q + R), ``response_mask`` (N, R) and
    ``lengths`` (N,). ``extra_column`` adds one padding column, so that every row has the
    position after its last token (a scalar head reads the state there)."""
    query = pad([torch.tensor(p, dtype=torch.long) for p in prompts], pad_id, "left")  # (N, Q)
    query_mask = pad([torch.ones(len(p), dtype=torch.long) for p in prompts], 0, "left")
    extra = [pad_id] if extra_column else []
    response = pad([torch.tensor(list(c) + extra, dtype=torch.long) for c in completions], pad_id, "right")  # (N, R)
    response_mask = pad([torch.tensor([1] * len(c) + [0] * len(extra), dtype=torch.long) for c in completions], 0, "right")
    mask = torch.cat([query_mask, response_mask], dim=1)  # (N, Q + R)
    return {"query_tensors": query, "response_tensors": response, "attention_mask": mask,
            "position_ids": position_ids_from_mask(mask), "response_mask": response_mask.float(),
            "lengths": torch.tensor([len(c) for c in completions])}


class PairStore(Dataset):
    """One item per pair: ``prompt``, ``chosen`` and ``rejected`` token ids, ``margin``, and
    the reference's log-probs once a DPO trainer has computed them."""

    def __init__(self, items: list[dict[str, Any]], pad_id: int, extra_column: bool = False):
        super().__init__()
        self.items, self.pad_id, self.extra_column = items, pad_id, extra_column

    def __getitem__(self, ix: int) -> dict[str, Any]:
        return self.items[ix]

    def __len__(self) -> int:
        return len(self.items)

    def collate(self, items: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """2B rows, each pair's chosen row then its rejected row (engines collate each
        micro-batch's pairs on their own, so a pair never straddles two), ``margin`` (2B,) repeated
        on both rows, and ``ref_logps`` (2B,) when every item carries the reference's."""
        prompts = [it["prompt"] for it in items for _ in range(2)]
        completions = [c for it in items for c in (it["chosen"], it["rejected"])]
        batch = response_batch(prompts, completions, self.pad_id, self.extra_column)
        batch["margin"] = torch.tensor([it.get("margin", 0.0) for it in items for _ in range(2)], dtype=torch.float)
        if all("ref_chosen_logps" in it for it in items):
            batch["ref_logps"] = torch.tensor([v for it in items for v in (it["ref_chosen_logps"], it["ref_rejected_logps"])],
                                              dtype=torch.float)
        if items and all("trunk_chosen" in it for it in items):
            batch["trunk"] = padded_trunk([t for it in items for t in (it["trunk_chosen"], it["trunk_rejected"])], prompts)
        return batch


def padded_trunk(rows: Sequence[torch.Tensor], prompts: Sequence[Sequence[int]]) -> torch.Tensor:
    """(N, Q + R, H) frozen-trunk hidden states laid out as ``response_batch`` lays out the
    tokens (each row covers its prompt then its completion: prompts left-padded, completions
    right-padded, zeros in the padding, which attention never reads)."""
    if any(t.shape[0] < len(p) for t, p in zip(rows, prompts)):
        raise ValueError("trunk: a row is shorter than its prompt; it must cover the prompt and the completion tokens")
    return torch.cat([pad([t[: len(p)] for t, p in zip(rows, prompts)], 0.0, "left"),
                      pad([t[len(p):] for t, p in zip(rows, prompts)], 0.0, "right")], dim=1)


def pairs_of(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(2B,) rows as collated (chosen, rejected, chosen, ...) -> the chosen (B,) and rejected (B,)."""
    if values.shape[0] % 2:
        raise ValueError(f"a micro-batch of {values.shape[0]} rows holds half a pair; the engine must split "
                         f"whole pairs (collate each micro-batch's items, Engine.step)")
    return values[0::2], values[1::2]


def make_pair_store(samples: Sequence[Any], tokenizer: Any, max_length: int, *, append_eos: bool = True,
                    extra_column: bool = False) -> PairStore:
    """Pairs (``{"prompt", "chosen", "rejected"[, "margin"]}``, as the ``preference_pairs``
    source gives them, or ``(prompt, chosen, rejected)`` tuples) -> :class:`PairStore`."""
    if not samples:
        raise ValueError("samples: no preference pairs; give at least one {prompt, chosen, rejected}")
    items = []
    for i, sample in enumerate(samples):
        where = f"samples[{i}]"
        if isinstance(sample, (list, tuple)) and len(sample) == 3:
            sample = dict(zip(("prompt", "chosen", "rejected"), sample))
        if not isinstance(sample, dict):
            raise ValueError(f"{where}: a preference pair is {{prompt, chosen, rejected}}, got {type(sample).__name__}")
        pair = check_pair(sample, where)
        prompt, chosen = truncate(*prompt_completion_ids(pair["prompt"], pair["chosen"], tokenizer, where, append_eos), max_length)
        prompt_r, rejected = truncate(*prompt_completion_ids(pair["prompt"], pair["rejected"], tokenizer, where, append_eos), max_length)
        if prompt_r != prompt:  # a long rejected answer cut more of the prompt: both keep the shorter prompt
            prompt = prompt[-min(len(prompt), len(prompt_r)):]
        item = {"prompt": prompt, "chosen": chosen, "rejected": rejected}
        if "margin" in pair:
            item["margin"] = pair["margin"]
        items.append(item)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    return PairStore(items, pad_id, extra_column)
