"""The engine's forward kinds (``rlkit_core.engine``) on the accelerate wrappers.

Each function takes the model to call (the DDP/DeepSpeed/FSDP wrapper while training, so the
pass is seen by the wrapper; the unwrapped model for no-grad scoring), the unwrapped model for
its layout, and a batch on the device; it returns the outputs the method asked for.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Sequence

import torch
import torch.nn.functional as F

from rlkit_methods.engine_kit import IGNORE_INDEX, batched_index_select, logprobs_of_labels, position_ids_from_mask


def _get(batch: Any, key: str, default: Any = None) -> Any:
    return batch.get(key, default) if isinstance(batch, dict) else getattr(batch, key, default)


def _policy_outputs(out, response) -> dict[str, Any]:
    # a reward model has no LM logits, only its score head's values
    result = {"logprobs": logprobs_of_labels(out.logits, response).float()} if out.logits is not None else {}
    if out.values is not None:  # a model with a value head
        result["values"] = out.values.float()
    return result


def plain_response_forward(model, batch) -> dict[str, Any]:
    """A plain LM (``lm`` heads, no reference): log-probs of each response token."""
    query, response, mask = _get(batch, "query_tensors"), _get(batch, "response_tensors"), _get(batch, "attention_mask")
    ids = torch.cat([query, response], dim=1)  # (B, Q + R)
    R = response.shape[1]
    position_ids = _get(batch, "position_ids")
    if position_ids is None:
        position_ids = position_ids_from_mask(mask)  # positions follow the real tokens
    logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids, use_cache=False,
                   **_keep_logits(model, R + 1)).logits
    return {"logprobs": logprobs_of_labels(logits[:, -R - 1 : -1], response).float()}  # t predicts t + 1


def _keep_logits(model, keep: int) -> dict[str, int]:
    """HF's ``logits_to_keep``: the LM head on the last ``keep`` positions only (the prompt's
    logits are never read), where the model's forward takes it."""
    inner = getattr(model, "module", model)  # DDP's wrapper
    inner = inner.get_base_model() if hasattr(inner, "get_base_model") else inner  # peft's
    return {"logits_to_keep": keep} if _takes_logits_to_keep(type(inner)) else {}


@functools.cache
def _takes_logits_to_keep(model_class: type) -> bool:
    """Read once per model class: this runs at every rollout forward."""
    return "logits_to_keep" in inspect.signature(model_class.forward).parameters


def response_forward(model, unwrapped, batch, want: Sequence[str] = (), *, train: bool) -> dict[str, Any]:
    """Policy log-probs (and values, with a value head) of each response token, and the
    reference's and the trunk when asked and the model has them."""
    if not hasattr(unwrapped, "score_rollout"):
        return plain_response_forward(model, batch)
    query, response = _get(batch, "query_tensors"), _get(batch, "response_tensors")
    Q = query.shape[1]
    mask = _get(batch, "attention_mask")  # (B, Q + R)
    if train:
        trunk = _get(batch, "trunk")
        cached = {"trunk_hidden": trunk} if trunk is not None else {}
        out = model(input_ids=query, attention_mask=mask[:, :Q], response_ids=response, response_mask=mask[:, Q:], **cached)
        return _policy_outputs(out, response)
    out, ref_logits = unwrapped.score_rollout(query, mask[:, :Q], response, mask[:, Q:], policy="no_logprobs" not in want)
    result = _policy_outputs(out, response)
    if "ref_logprobs" in want and ref_logits is not None:
        result["ref_logprobs"] = logprobs_of_labels(ref_logits, response).float()
    if "trunk" in want and getattr(unwrapped, "caches_trunk", lambda: False)():
        real = mask.bool()  # each rollout's trunk rows over its real prompt and response tokens
        result["trunk"] = [row[keep] for row, keep in zip(out.trunk_hidden, real)]
    return result


def tokens_forward(model, unwrapped, batch, *, seq2seq: bool, virtual_tokens: int = 0) -> dict[str, Any]:
    """log p of each label token (causal: token t + 1 from position t; seq2seq: the decoder's
    targets) and the mask of the tokens that count."""
    labels = batch["labels"]
    if seq2seq:
        # the decoder reads [start] + labels[:-1] (passing labels would make the model compute a second loss)
        decoder_input_ids = unwrapped.prepare_decoder_input_ids_from_labels(labels=labels)
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                       decoder_input_ids=decoder_input_ids, use_cache=False).logits  # (B, R, V): t predicts labels[t]
    else:
        if virtual_tokens:
            # peft numbers positions from its first virtual token and drops position ids, so
            # the real tokens must open each row; its logits cover virtual + real positions
            batch = real_tokens_first(batch)
            labels = batch["labels"]
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False).logits
            logits = logits[:, virtual_tokens:]
        else:
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                           position_ids=batch["position_ids"], use_cache=False).logits
        logits, labels = logits[:, :-1], labels[:, 1:]  # (B, T-1, V) predicts the next token
    nll = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX, reduction="none")
    return {"logprobs": -nll.view(labels.shape), "mask": (labels != IGNORE_INDEX).float()}


def ilql_forward(model, batch, *, seq2seq: bool) -> dict[str, Any]:
    """Logits at the actions, Q and target Q at the actions, V at the states."""
    if seq2seq:
        inputs = {k: _get(batch, k) for k in ("input_ids", "attention_mask", "decoder_input_ids", "decoder_attention_mask")}
    else:
        inputs = {k: _get(batch, k) for k in ("input_ids", "attention_mask", "position_ids")}
    out = model(**{k: v for k, v in inputs.items() if v is not None},
                states_ixs=_get(batch, "states_ixs"), actions_ixs=_get(batch, "actions_ixs"))
    if seq2seq:
        A = _get(batch, "decoder_input_ids").shape[1] - 1
        action_logits = out.logits[:, :A]  # decoder position t predicts action t + 1
    else:
        action_logits = batched_index_select(out.logits, _get(batch, "actions_ixs"), dim=1)  # (B, A, V)
    return {"action_logits": action_logits, "qs": out.qs, "target_qs": out.target_qs, "vs": out.vs}


def real_tokens_first(batch):
    """A left-padded batch with its padding moved to the right (rows rolled left); a
    right-padded batch unchanged."""
    mask = batch["attention_mask"]  # (B, T), the real tokens contiguous
    lead = (mask.cumsum(-1) == 0).sum(-1, keepdim=True)  # (B, 1) leading pads
    index = (torch.arange(mask.shape[1], device=mask.device) + lead) % mask.shape[1]  # (B, T)
    return {k: batch[k].gather(1, index) for k in ("input_ids", "attention_mask", "labels")}
