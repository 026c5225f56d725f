"""ILQL experience: samples tokenized into states, actions, dones and rewards.

For a sample whose outputs are the token spans [s_k, e_k), trlX's indexing is kept:

* ``actions_ixs``: positions whose *next* token is an output token (``s_k - 1 .. e_k - 2``);
  the action at index i is ``input_ids[i + 1]``;
* ``states_ixs``: ``actions_ixs`` followed by the last position (the terminal state);
* ``dones``: 1 for each state followed by another, 0 for the terminal one;
* ``rewards``: 0 on every action except the last, which holds the sample's normalised reward.

Rewards are normalised over the dataset: ``r' = r - mean``, then divided by ``std + eps``
only when there are at least two samples and ``std > 0`` (equal rewards give 0, never NaN).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch
from torch.utils.data import Dataset

from rlkit_methods.common.validate import check_rewards, check_samples
from rlkit_methods.data.dialogue import DialogMessage, tokenize_dialogue
from rlkit_methods.data.padding import pad, position_ids_from_mask
from rlkit_methods.data.trlx_loader import TrlxLoader

logger = logging.getLogger(__name__)


@dataclass
class ILQLElement:
    input_ids: torch.Tensor  # (T,)
    attention_mask: torch.Tensor  # (T,)
    rewards: torch.Tensor  # (A,)
    states_ixs: torch.Tensor  # (A + 1,)
    actions_ixs: torch.Tensor  # (A,)
    dones: torch.Tensor  # (A + 1,)


@dataclass
class ILQLBatch:
    input_ids: torch.Tensor  # (B, T) right-padded
    attention_mask: torch.Tensor  # (B, T)
    rewards: torch.Tensor  # (B, A)
    states_ixs: torch.Tensor  # (B, A + 1)
    actions_ixs: torch.Tensor  # (B, A)
    dones: torch.Tensor  # (B, A + 1), 0 on padding
    position_ids: Optional[torch.Tensor] = None  # (B, T)


def ilql_collate_fn(elems: Sequence[ILQLElement]) -> ILQLBatch:
    """Right-pad (indices count from the first token, so padding must be on the right)."""
    attention_mask = pad([e.attention_mask for e in elems], 0, "right")
    return ILQLBatch(
        input_ids=pad([e.input_ids for e in elems], 0, "right"),
        attention_mask=attention_mask,
        rewards=pad([e.rewards for e in elems], 0.0, "right"),
        states_ixs=pad([e.states_ixs for e in elems], 0, "right"),
        actions_ixs=pad([e.actions_ixs for e in elems], 0, "right"),
        dones=pad([e.dones for e in elems], 0, "right"),
        position_ids=position_ids_from_mask(attention_mask),
    )


class ILQLRolloutStorage(TrlxLoader, Dataset):
    """trlX's ``ILQLRolloutStorage``: parallel lists of per-sample tensors."""

    loader_shuffle, loader_drop_last = True, "several processes"  # trlX's create_loader defaults

    def __init__(self, input_ids, attention_mask, rewards, states_ixs, actions_ixs, dones):
        super().__init__()
        self.input_ids, self.attention_mask, self.rewards = input_ids, attention_mask, rewards
        self.states_ixs, self.actions_ixs, self.dones = states_ixs, actions_ixs, dones

    def __getitem__(self, ix: int) -> ILQLElement:
        return ILQLElement(
            self.input_ids[ix], self.attention_mask[ix], self.rewards[ix],
            self.states_ixs[ix], self.actions_ixs[ix], self.dones[ix],
        )

    def __len__(self) -> int:
        return len(self.input_ids)

    def collate(self, elems: Sequence[ILQLElement]) -> ILQLBatch:
        return ilql_collate_fn(elems)


class ILQLSeq2SeqRolloutStorage(TrlxLoader, Dataset):
    """trlX's ``ILQLSeq2SeqRolloutStorage``: parallel lists of per-sample tensors for an
    encoder-decoder model; ``decoder_input_ids`` are ``[start, a_1 .. a_n]`` and the indices
    count decoder positions. Batches are right-padded with ``pad_token_id`` (trlX pads with 0,
    T5's pad id) and carry the decoder attention mask trlX left out."""

    loader_shuffle, loader_drop_last = True, "several processes"  # trlX's create_loader defaults

    def __init__(self, input_ids, attention_mask, decoder_input_ids, rewards, states_ixs, actions_ixs, dones,
                 pad_token_id: int = 0):
        super().__init__()
        self.input_ids, self.attention_mask, self.decoder_input_ids = input_ids, attention_mask, decoder_input_ids
        self.rewards, self.states_ixs, self.actions_ixs, self.dones = rewards, states_ixs, actions_ixs, dones
        self.pad_token_id = pad_token_id

    def __getitem__(self, ix: int) -> dict[str, torch.Tensor]:
        decoder_input_ids = torch.as_tensor(self.decoder_input_ids[ix])
        return {
            "input_ids": torch.as_tensor(self.input_ids[ix]), "attention_mask": torch.as_tensor(self.attention_mask[ix]),
            "decoder_input_ids": decoder_input_ids, "decoder_attention_mask": torch.ones_like(decoder_input_ids),
            "rewards": torch.as_tensor(self.rewards[ix]), "states_ixs": torch.as_tensor(self.states_ixs[ix]),
            "actions_ixs": torch.as_tensor(self.actions_ixs[ix]), "dones": torch.as_tensor(self.dones[ix]),
        }

    def __len__(self) -> int:
        return len(self.input_ids)

    def collate(self, items: Sequence[dict[str, torch.Tensor]]):
        """Pad into a ``Seq2SeqILQLBatch`` (the batch the seq2seq ILQL trainer reads)."""
        from rlkit_methods.data.seq2seq import Seq2SeqILQLBatch  # that module imports this one

        pad_values = {"input_ids": self.pad_token_id, "decoder_input_ids": self.pad_token_id, "rewards": 0.0}
        return Seq2SeqILQLBatch(**{key: pad([e[key] for e in items], pad_values.get(key, 0), "right") for key in items[0]})


def normalize_rewards(rewards: Sequence[float]) -> torch.Tensor:
    """r - mean(r), divided by (std(r) + eps) when len(r) > 1 and std(r) > 0 (see module doc)."""
    returns = torch.tensor(list(rewards), dtype=torch.float64)
    returns = returns - returns.mean()
    if len(returns) > 1:
        std = returns.std()
        if std > 0:
            returns = returns / (std + torch.finfo(returns.dtype).eps)
    return returns.float()


def dialogue_indices(messages: Sequence[DialogMessage]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, states_ixs, actions_ixs, dones) of one tokenized sample."""
    length, actions = 0, []
    for m in messages:
        if m.is_output:
            actions.append(torch.arange(length - 1, length + len(m.tokens) - 1))
        length += len(m.tokens)
    if not actions:
        raise ValueError("sample has no output tokens; ILQL needs at least one output")
    actions_ixs = torch.cat(actions)
    states_ixs = torch.cat([actions_ixs, torch.tensor([length - 1])])
    dones = torch.tensor([1] * (len(states_ixs) - 1) + [0], dtype=torch.long)
    input_ids = torch.tensor([t for m in messages for t in m.tokens], dtype=torch.long)
    return input_ids, states_ixs, actions_ixs, dones


def make_experience(samples: Sequence[Any], rewards: Sequence[float], tokenizer: Any = None, max_length: int = 2048,
                    verbose: bool = True) -> ILQLRolloutStorage:
    """Tokenize samples (strings or ``[prompt, output, ...]`` lists; already tokenized
    ``DialogMessage`` lists when ``tokenizer`` is None) and place the normalised rewards.
    ``verbose`` (trlX's flag) logs the first sample and the length statistics at INFO level."""
    if tokenizer is not None:
        samples = check_samples(samples)
    rewards = check_rewards(rewards, len(samples))
    dialogs = []
    for i, sample in enumerate(samples):
        try:
            dialogs.append(tokenize_dialogue(sample, tokenizer, max_length) if tokenizer is not None else sample)
        except ValueError as exc:
            raise ValueError(f"samples[{i}]: {exc}") from None
    all_input_ids, all_states, all_actions, all_dones, all_rewards = [], [], [], [], []
    for i, (dialog, ret) in enumerate(zip(dialogs, normalize_rewards(rewards))):
        try:
            input_ids, states_ixs, actions_ixs, dones = dialogue_indices(dialog)
        except ValueError as exc:
            raise ValueError(f"samples[{i}]: {exc}") from None
        r = torch.zeros(len(actions_ixs))
        r[-1] = ret  # the reward arrives with the last action
        all_input_ids.append(input_ids)
        all_states.append(states_ixs)
        all_actions.append(actions_ixs)
        all_dones.append(dones)
        all_rewards.append(r)
    attention_mask = [torch.ones(len(x), dtype=torch.long) for x in all_input_ids]
    if verbose:
        log_experience(all_input_ids, all_actions, rewards, tokenizer)
    return ILQLRolloutStorage(all_input_ids, attention_mask, all_rewards, all_states, all_actions, all_dones)


def log_experience(input_ids: Sequence[torch.Tensor], actions_ixs: Sequence[torch.Tensor], rewards: Sequence[float],
                   tokenizer: Any = None) -> None:
    """What trlX printed while making ILQL experience, as INFO log lines (plugins never print)."""
    if not logger.isEnabledFor(logging.INFO):
        return
    sample_lengths = torch.tensor([len(x) for x in input_ids], dtype=torch.float)
    output_lengths = torch.tensor([len(a) for a in actions_ixs], dtype=torch.float)
    if tokenizer is not None:
        first_output = int(actions_ixs[0][0]) + 1
        logger.info("ILQL sample 0: prompt %r, output %r, reward %s", tokenizer.decode(input_ids[0][:first_output]),
                    tokenizer.decode(input_ids[0][first_output:]), rewards[0])
    for name, lengths in (("prompt", sample_lengths - output_lengths), ("output", output_lengths), ("sample", sample_lengths)):
        logger.info("ILQL %s length: mean %.2f in [%d, %d]", name, lengths.mean(), lengths.min(), lengths.max())
