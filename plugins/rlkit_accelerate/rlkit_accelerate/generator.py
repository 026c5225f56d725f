"""The accelerate engine's default generator (``rlkit_core.generator``): its own sampler, HF
``generate`` with each distinct prompt's prefill run once, on the engine's weights.

Log-probs come from the logits the sampler computes anyway, with no second forward: a forward
hook on the HF model that ``generate`` runs keeps ``log softmax`` of each step's last-position
logits (the model's own output, before any logits processor: temperature, top-k...) until the
next step, whose input is the token that was sampled from them (a step fed embeddings, as
prompt tuning's are, keeps its row until the end). The last token is read from the returned
ids. Only the last N steps count (a shared prompt prefill runs before ``generate``).

Sharing the engine's weights, it needs no sync: ``update_weights`` records the version.
Q-guided decoding (ILQL's heads) is the engine's own loop; it reports no log-probs, nor does
beam search (rows are reordered between steps).
"""

from __future__ import annotations

from typing import Any, Iterator

import torch
from torch import nn

from rlkit_core.engine import QGuidance
from rlkit_core.errors import RlkitError
from rlkit_core.generator import NamedTensors, Samples, SharedWeightsGenerator, real_response_mask

from rlkit_accelerate.models.adapters import is_peft_model
from rlkit_accelerate.models.shared_prompts import one_path
from rlkit_accelerate.sharding import full_parameters

# wrappers' module prefixes that are not part of the HF model's own names
WRAPPER_PREFIXES = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")


def sampling_model(model: nn.Module) -> nn.Module | None:
    """The HF model whose forward ``generate`` runs, inside rlkit's wrappers and peft's."""
    from transformers import PreTrainedModel

    for _ in range(4):
        if isinstance(model, PreTrainedModel):
            return model
        model = model.get_base_model() if is_peft_model(model) else getattr(model, "base_model", None)
        if model is None:
            return None
    return None


class StepLogprobs:
    """A forward hook (``with_kwargs=True``) that gathers log p(token) at every step."""

    def __init__(self):
        self.pending: torch.Tensor | None = None  # (B, V) log-probs of the last step
        self.values: list[torch.Tensor] = []  # per step: (B,) at the token fed next, or (B, V) if not seen

    def __call__(self, module, args, kwargs, output) -> None:
        ids = kwargs.get("decoder_input_ids")
        if ids is None:
            ids = kwargs.get("input_ids", args[0] if args else None)
        if self.pending is not None:
            seen = ids is not None and ids.shape[0] == self.pending.shape[0]
            self.values.append(self.pending.gather(1, ids[:, -1:].to(self.pending.device))[:, 0] if seen else self.pending)
        logits = output.logits if hasattr(output, "logits") else output[0]
        self.pending = logits[:, -1].float().log_softmax(-1)

    def finish(self, new_tokens: torch.Tensor) -> torch.Tensor | None:
        """(B, N) log-probs of ``new_tokens``, or None if the steps seen do not account for them."""
        N = new_tokens.shape[1]
        if N == 0:
            return new_tokens.new_zeros(new_tokens.shape, dtype=torch.float32)
        if self.pending is None or self.pending.shape[0] != new_tokens.shape[0]:
            return None
        steps = (self.values + [self.pending])[-N:]
        if len(steps) < N or any(s.shape[0] != new_tokens.shape[0] for s in steps):
            return None
        tokens = new_tokens.to(self.pending.device)
        steps = [s if s.dim() == 1 else s.gather(1, tokens[:, t, None])[:, 0] for t, s in enumerate(steps)]
        return torch.stack(steps, dim=1).cpu()


class AccelerateGenerator(SharedWeightsGenerator):
    """``rlkit_core.generator.Generator`` on the accelerate engine's own sampler."""

    def generate(self, input_ids, attention_mask=None, *, guidance: QGuidance | None = None, **gen_kwargs) -> Samples:
        engine = self.engine
        lm = sampling_model(engine.unwrapped_model)
        if engine.spec.heads == "ilql" or lm is None or not one_path(lm, gen_kwargs):
            ids = engine.generate(input_ids, attention_mask, guidance=guidance, **gen_kwargs)
            return Samples(ids, None, self.version)
        recorder = StepLogprobs()
        handle = lm.register_forward_hook(recorder, with_kwargs=True)
        try:
            ids = engine.generate(input_ids, attention_mask, **gen_kwargs)
        finally:
            handle.remove()
        new = ids[:, input_ids.shape[1]:]
        logprobs = recorder.finish(new)
        if logprobs is not None:
            logprobs = logprobs * real_response_mask(new, gen_kwargs.get("eos_token_id", engine.tokenizer.eos_token_id))
        return Samples(ids, logprobs, self.version)



def hf_named_weights(engine: Any, *, trainable_only: bool) -> NamedTensors:
    """(HF name, tensor) of the engine's HF model (the heads and a separate reference are not
    part of it), whole on every rank under ZeRO-3/FSDP (a collective: iterate to the end on
    every rank). ``trainable_only``: only the parameters the optimizer updates."""
    model = engine.unwrapped_model
    lm = sampling_model(model)
    if lm is None or is_peft_model(getattr(model, "base_model", model)) or is_peft_model(model):
        raise RlkitError("named_weights: a model with PEFT adapters (model.peft_config) cannot be synced to a "
                         "separate generator yet; use train.generator: null")
    return _named(engine.model, lm, trainable_only)


def _named(wrapper: nn.Module, lm: nn.Module, trainable_only: bool) -> Iterator[tuple[str, torch.Tensor]]:
    with full_parameters(wrapper):
        for name, param in lm.named_parameters():
            if trainable_only and not param.requires_grad:
                continue
            for prefix in WRAPPER_PREFIXES:
                name = name.replace(prefix, "")
            yield name, param.detach()
