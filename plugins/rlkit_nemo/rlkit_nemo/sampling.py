"""Autoregressive sampling on a (tensor/pipeline-parallel) Megatron GPT.

:class:`ModelRunner` runs the model for each new token. With the KV cache (``use_cache``,
the default) it holds megatron-core's ``StaticInferenceContext``: the prompts run once
(prefill) and every later step runs only the newest token, whose attention reads the keys
and values the context keeps per layer (each TP rank its heads, each PP stage its layers,
the new token's hidden state passed stage to stage by the pipeline schedule). Without it
(``use_cache=False``) every step reruns the whole sequence. Either way only the final
position reaches the output layer: the last stage turns its vocab-parallel logits (B, V / tp)
into full next-token logits (gathered over TP, the vocabulary's padding cut off, so a seeded
draw is the same at every TP size), steered by ILQL's heads when asked
(:func:`rlkit_methods.ilql.sampling.q_guided_logits`), and one rank samples; the token is then
shared with the other ranks of the model replica, so every TP and PP rank holds the same
sequences. Data-parallel ranks sample with their own seeds.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from rlkit_core.engine import QGuidance
from rlkit_methods.engine_kit import position_ids_from_mask, q_guided_logits, topk_mask

SAMPLING_ARGS = ("max_new_tokens", "eos_token_id", "pad_token_id", "temperature", "top_k", "top_p", "do_sample", "use_cache")


class ModelRunner:
    """``run(ids, mask, head_kwargs)`` for :func:`sample`: the model's output at the last
    position, on the last stage (None elsewhere). ``forward(batch)`` runs the engine's
    ``"logits"`` kind on a batch of ``input_ids``/``position_ids`` (the tokens to run),
    ``attention_mask`` (every token so far) and ``inference_context``."""

    def __init__(self, forward: Callable[[dict], Any], batch_size: int, max_length: int, use_cache: bool = True):
        self.forward = forward
        self.context = None
        if use_cache:
            from megatron.core.inference.contexts import StaticInferenceContext

            # each layer's keys and values: (max_length, B, query groups / tp, head dim)
            self.context = StaticInferenceContext(batch_size, max_length)
        self.seen = 0  # tokens whose keys and values the context holds

    def __call__(self, ids: torch.Tensor, mask: torch.Tensor, head_kwargs: Optional[dict]) -> Any:
        new = ids[:, self.seen:] if self.context is not None else ids  # (B, N): the tokens to run
        positions = position_ids_from_mask(mask)[:, -new.shape[1]:]
        batch = {"input_ids": new, "attention_mask": mask, "position_ids": positions, "inference_context": self.context,
                 **(head_kwargs or {})}
        output = self.forward(batch)
        if self.context is not None:  # every stage keeps its layers' cache in step
            self.context.increment_sequence_len_offset(new.shape[1])
            self.context.enable_decode_mode()
            self.seen = ids.shape[1]
        return output


def last_position(output: Any, vocab_size: int) -> Any:
    """A last-stage ``"logits"`` output, (B, 1, V / tp) logits and the heads there, as
    :func:`next_token_logits` reads it: the logits and the target Qs gathered over TP and cut
    to the real vocabulary, (B, V). Sampling from the padded width would change which token a
    seeded ``torch.multinomial`` draws with the TP size (the padding depends on it); the
    engine calls this before sampling. Collective over the TP group."""
    from rlkit_nemo.forwards import gather_vocab

    logits, heads = output if isinstance(output, tuple) else (output, None)
    logits = gather_vocab(logits[:, -1])[:, :vocab_size]
    if not isinstance(heads, tuple):  # no heads, or PPO's value head (sampling ignores it)
        return logits if heads is None else (logits, heads)
    qs, target_qs, vs = heads
    return logits, (qs, tuple(gather_vocab(tq[:, -1])[:, :vocab_size] for tq in target_qs), vs)


def next_token_logits(output: Any, last_tokens: torch.Tensor, guidance: Optional[QGuidance], top_k: int,
                      temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's own (B, V) logits and those to sample from (top-k and temperature applied),
    from a last-stage output at the final position (:func:`last_position`: (B, V) logits, and
    the heads there)."""
    logits, heads = output if isinstance(output, tuple) else (output, None)
    if guidance is None or heads is None:
        return logits, topk_mask(logits / temperature, top_k)
    _, target_qs, vs = heads  # Q (B, V) and V (B, 1, 1) at the final position
    q = target_qs[0]
    for tq in target_qs[1:]:
        q = q.minimum(tq)
    mask = None if guidance.logit_mask is None else torch.as_tensor(guidance.logit_mask, dtype=torch.bool)
    return logits, q_guided_logits(logits, q, vs[:, -1].float(), beta=guidance.beta, top_k=top_k,
                                   temperature=temperature, logit_mask=mask, last_tokens=last_tokens)


@torch.no_grad()
def sample(run: Callable[[torch.Tensor, torch.Tensor, Optional[dict]], Any], share: Callable[[Optional[torch.Tensor], int], torch.Tensor],
           input_ids: torch.Tensor, attention_mask: torch.Tensor, *, guidance: Optional[QGuidance] = None,
           max_new_tokens: int = 20, eos_token_id: Optional[int] = None, pad_token_id: int = 0, temperature: float = 1.0,
           top_k: int = 0, top_p: float = 1.0, do_sample: bool = True, logprobs: Optional[list] = None) -> torch.Tensor:
    """Left-padded prompts (B, Q) -> (B, Q + N): the prompts, then new tokens, pad after EOS.
    ``logprobs``, a list, receives for every step log softmax of the model's own logits at the
    token chosen, (B,) with 0 after EOS, on the last stage (None on the others).

    ``run(ids, mask, head_kwargs)`` is the model's output at the last position, (B, 1, ...),
    on the last stage (None elsewhere), e.g. a :class:`ModelRunner`; ``share(token or None,
    batch)`` returns the token the sampling rank chose, on every rank."""
    if temperature <= 0:
        raise ValueError(f"gen_kwargs.temperature: must be > 0, got {temperature}")
    ids, mask = input_ids, attention_mask
    B = ids.shape[0]
    done = torch.zeros(B, dtype=torch.bool, device=ids.device)
    last = torch.zeros((B, 1), dtype=torch.long, device=ids.device)  # the one position the heads see
    head_kwargs = {"states_ixs": last, "actions_ixs": last} if guidance is not None else None
    for _ in range(max_new_tokens):
        output = run(ids, mask, head_kwargs)
        token = raw = None
        if output is not None:
            raw, logits = next_token_logits(output, ids[:, -1], guidance, top_k, temperature)
            if do_sample:
                if top_p < 1.0:
                    logits = _top_p(logits, top_p)
                token = torch.multinomial(logits.softmax(-1), 1)[:, 0]
            else:
                token = logits.argmax(-1)
        token = share(token, B).to(ids.device)
        real = ~done  # EOS itself is a real token; what follows it is padding
        token = torch.where(done, torch.full_like(token, pad_token_id), token)
        if logprobs is not None:
            logprobs.append(None if raw is None else
                            raw.float().log_softmax(-1).gather(1, token[:, None].to(raw.device))[:, 0] * real.to(raw.device))
        ids = torch.cat([ids, token[:, None]], 1)
        mask = torch.cat([mask, real.long()[:, None]], 1)
        if eos_token_id is not None:
            done = done | (token == eos_token_id)
        if bool(done.all()):
            break
    return ids


def _top_p(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of tokens whose probability reaches ``top_p`` (nucleus sampling)."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    cumulative = sorted_logits.softmax(-1).cumsum(-1)
    drop = cumulative - sorted_logits.softmax(-1) >= top_p  # tokens after the nucleus
    return logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
