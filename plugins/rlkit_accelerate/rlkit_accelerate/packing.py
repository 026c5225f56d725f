"""Padding-free training forwards (``train.packing``): a micro-batch's rows as one sequence.

The real tokens of the B padded rows are concatenated into one sequence [1, N] (N real tokens)
whose position ids restart at 0 on every row, and the model is called without an attention
mask. transformers (``masking_utils.find_packed_sequence_indices``) reads the rows back from
those position ids and gives SDPA and eager attention a block-diagonal causal mask, so no token
attends across rows; flash-attention's varlen kernels take the same boundaries on a GPU. A
model whose attention ignores them is refused at build (:func:`check_packing` runs two copies
of one row packed and compares them).

The method's collate and loss stay as they are: each forward kind reads only the packed
positions its outputs need (TRL's ``logits_to_keep``: the LM head runs there alone) and scatters
them back into the padded layout, with zeros at positions the padded path fills with values no
loss counts (pad tokens, pad states).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from rlkit_core.errors import ConfigError
from rlkit_methods.engine_kit import IGNORE_INDEX, logprobs_of_labels

PROBE_TOKENS = 6


def _get(batch: Any, key: str, default: Any = None) -> Any:
    return batch.get(key, default) if isinstance(batch, dict) else getattr(batch, key, default)


@dataclass
class PackedRows:
    """Where each real token of a padded (B, T) batch sits in the packed sequence [1, N]."""

    real: torch.Tensor  # (B, T) bool
    index: torch.Tensor  # (B, T) its packed position; a pad gets the one of a real token before it (or 0)
    position_ids: torch.Tensor  # (1, N), 0 at each row's first real token

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, ...) -> (1, N, ...): the rows' real positions, row after row."""
        return x[self.real].unsqueeze(0)

    def unpack(self, x: torch.Tensor, at: torch.Tensor | None = None) -> torch.Tensor:
        """(1, M, ...) values at the positions ``at`` (B, T) bool (default: every real one) ->
        (B, T, ...) with zeros elsewhere."""
        at = self.real if at is None else at
        out = x.new_zeros((*at.shape, *x.shape[2:]))
        out[at] = x[0]
        return out

    def columns(self, ixs: torch.Tensor) -> torch.Tensor:
        """(B, K) padded columns -> (B, K) packed positions."""
        return self.index.gather(1, ixs)


def pack_rows(attention_mask: torch.Tensor) -> PackedRows:
    real = attention_mask.bool()  # (B, T)
    positions = attention_mask.long().cumsum(-1) - 1  # (B, T) positions follow the real tokens
    index = (real.flatten().long().cumsum(0) - 1).clamp(min=0).view(real.shape)
    return PackedRows(real, index, positions[real].unsqueeze(0))


def _lm(model: torch.nn.Module) -> torch.nn.Module:
    """The HF causal LM under rlkit's head wrappers (which keep it as ``base_model``)."""
    return model.base_model if hasattr(model, "heads_file") else model


@torch.no_grad()
def check_packing(model: torch.nn.Module, *, seq2seq: bool, virtual_tokens: int) -> None:
    """Refuse ``train.packing`` where it cannot hold: seq2seq models, prompt learning (peft
    numbers positions from its virtual tokens and drops position ids), and models whose
    attention does not keep packed rows apart (two copies of one row, packed, must give the
    same logits; a model attending across rows gives the second copy other ones)."""
    if seq2seq:
        raise ConfigError("train.packing: packs causal LMs' rows; a seq2seq model trains padded; set train.packing: false")
    if virtual_tokens:
        raise ConfigError("train.packing: peft prompt learning puts virtual tokens before every row and drops position "
                          "ids, so rows cannot be packed; set train.packing: false")
    lm = _lm(model)
    vocab = lm.get_input_embeddings().weight.shape[0]
    device = next(lm.parameters()).device
    row = torch.arange(3, 3 + PROBE_TOKENS, device=device) % vocab
    positions = torch.arange(PROBE_TOKENS, device=device)
    name = type(lm).__name__
    was_training = [(m, m.training) for m in lm.modules()]
    lm.eval()
    try:
        logits = lm(input_ids=torch.cat([row, row]).unsqueeze(0), position_ids=torch.cat([positions, positions]).unsqueeze(0),
                    use_cache=False, logits_to_keep=torch.arange(2 * PROBE_TOKENS, device=device)).logits[0].float()
    except TypeError as exc:  # (2 x PROBE_TOKENS, V) above
        raise ConfigError(f"train.packing: {name} does not take position_ids and logits_to_keep ({exc}); "
                          f"set train.packing: false") from None
    finally:
        for m, flag in was_training:
            m.training = flag
    first, second = logits[:PROBE_TOKENS], logits[PROBE_TOKENS:]
    if not torch.allclose(first, second, atol=1e-3 * (1 + first.abs().max().item())):
        attn = getattr(getattr(lm, "config", None), "_attn_implementation", None)
        raise ConfigError(f"train.packing: {name} (attention {attn}) lets packed rows attend to each other "
                          f"(its attention does not read rows from position ids); set train.packing: false")


def packed_tokens_forward(model, batch) -> dict[str, Any]:
    """The ``"tokens"`` kind packed: log p of each counted label (B, T - 1) and its mask; the LM
    head runs only at the positions whose next label counts."""
    labels = batch["labels"]  # (B, T)
    p = pack_rows(batch["attention_mask"])
    next_labels = F.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX)  # (B, T): the label position t predicts
    counted = p.real & (next_labels != IGNORE_INDEX)  # (B, T)
    keep = p.index[counted]  # (M,)
    logits = model(input_ids=p.pack(batch["input_ids"]), position_ids=p.position_ids, use_cache=False,
                   logits_to_keep=keep).logits  # (1, M, V)
    nll = F.cross_entropy(logits[0].float(), next_labels[counted], reduction="none")  # (M,)
    logprobs = p.unpack(-nll.unsqueeze(0), at=counted)[:, :-1]  # (B, T - 1)
    return {"logprobs": logprobs, "mask": counted[:, :-1].float()}


def packed_response_forward(model, unwrapped, batch) -> dict[str, Any]:
    """The ``"response"`` kind packed: log-probs (and values, with a value head) (B, R) of each
    response token, read at the real positions before them (column Q - 1 + j predicts response
    token j); with a kept ``trunk``, its real rows stand in for the frozen trunk."""
    query, response, mask = _get(batch, "query_tensors"), _get(batch, "response_tensors"), _get(batch, "attention_mask")
    Q, R = query.shape[1], response.shape[1]
    ids = torch.cat([query, response], dim=1)  # (B, Q + R)
    p = pack_rows(mask)
    states = p.real[:, Q - 1 : Q + R - 1]  # (B, R): the position before response token j is real
    keep = p.index[:, Q - 1 : Q + R - 1][states]  # (M,)
    inputs = {"input_ids": p.pack(ids), "position_ids": p.position_ids}
    if hasattr(unwrapped, "score_rollout"):  # rlkit's policy: heads on the LM's last hidden state
        trunk = _get(batch, "trunk")
        if trunk is not None:
            inputs["trunk_hidden"] = p.pack(trunk)
        out = model(**inputs, keep=keep)
        logits, values = out.logits, out.values  # (1, M, V), (1, M) or None
    else:
        logits, values = model(**inputs, use_cache=False, logits_to_keep=keep).logits, None
    result = {"logprobs": p.unpack(logprobs_of_labels(logits, response[states].unsqueeze(0)).float(), at=states)}
    if values is not None:
        result["values"] = p.unpack(values.float(), at=states)
    return result


def packed_ilql_forward(model, batch) -> dict[str, Any]:
    """The ``"ilql"`` kind packed: the heads read the packed states and actions, and the outputs
    come back as (B, A, V), (B, S, 1)."""
    p = pack_rows(_get(batch, "attention_mask"))
    states_ixs, actions_ixs = p.columns(_get(batch, "states_ixs")), p.columns(_get(batch, "actions_ixs"))  # (B, S), (B, A)
    B, S = states_ixs.shape
    A = actions_ixs.shape[1]
    out = model(input_ids=p.pack(_get(batch, "input_ids")), position_ids=p.position_ids,
                states_ixs=states_ixs.view(1, -1), actions_ixs=actions_ixs.view(1, -1))
    return {"action_logits": out.logits[0, actions_ixs],  # (B, A, V)
            "qs": tuple(q.view(B, A, -1) for q in out.qs), "target_qs": tuple(q.view(B, A, -1) for q in out.target_qs),
            "vs": out.vs.view(B, S, -1)}
