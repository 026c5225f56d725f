"""The NeMo engine's default generator (``rlkit_core.generator``): its own sampler
(:mod:`rlkit_nemo.sampling`: megatron-core's KV cache, TP/PP), on the engine's weights.

Log-probs come from the logits the sampler computes anyway: at every step the last stage
takes log softmax of the model's own full-vocabulary logits (gathered over TP, before
temperature and top-k) at the token chosen; the (B, N) result reaches every stage once, after
the last step. Sharing the engine's weights, it needs no sync: ``update_weights`` records the
version. Q-guided decoding (ILQL's heads) reports no log-probs.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from rlkit_core.engine import QGuidance
from rlkit_core.errors import ConfigError, RlkitError
from rlkit_core.generator import NamedTensors, Samples, SharedWeightsGenerator


@torch.no_grad()
def sample_on(engine: Any, input_ids, attention_mask=None, *, guidance: Optional[QGuidance] = None,
              logprobs: Optional[list] = None, **gen_kwargs) -> torch.Tensor:
    """The engine's ``generate``; ``logprobs`` as :func:`rlkit_nemo.sampling.sample`'s."""
    from rlkit_nemo.pipeline import share_token
    from rlkit_nemo.sampling import SAMPLING_ARGS, ModelRunner, sample

    unknown = sorted(set(gen_kwargs) - set(SAMPLING_ARGS))
    if unknown:
        raise ConfigError(f"method.gen_kwargs.{unknown[0]}: the NeMo engine's sampling does not take it; "
                          f"it takes {', '.join(SAMPLING_ARGS)}")
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    guidance = (guidance or QGuidance()) if engine.spec.heads == "ilql" else None
    gen_kwargs.setdefault("eos_token_id", engine.tokenizer.eos_token_id)
    gen_kwargs.setdefault("pad_token_id", engine.tokenizer.pad_token_id)
    if gen_kwargs.get("pad_token_id") is None:
        gen_kwargs["pad_token_id"] = gen_kwargs["eos_token_id"] or 0
    rows, length = input_ids.shape
    max_length = length + gen_kwargs.get("max_new_tokens", 20)

    def logits(batch):
        out = engine._outputs(engine.module, "logits", [batch])
        return None if out is None else out["output"]

    run = ModelRunner(logits, rows, max_length, use_cache=bool(gen_kwargs.pop("use_cache", True)))
    was = engine._evaluating()
    try:
        out = sample(run, lambda token, n: share_token(token, n, engine.ps, engine.device), input_ids.to(engine.device),
                     attention_mask.to(engine.device), guidance=guidance, logprobs=logprobs, **gen_kwargs)
    finally:
        engine.module.train(was)
    return out.cpu()


class NemoGenerator(SharedWeightsGenerator):
    """``rlkit_core.generator.Generator`` on the NeMo engine's own sampler."""

    def generate(self, input_ids, attention_mask=None, *, guidance: Optional[QGuidance] = None, **gen_kwargs) -> Samples:
        from rlkit_nemo.pipeline import from_last_stage

        engine = self.engine
        steps: Optional[list] = None if engine.spec.heads == "ilql" else []
        ids = sample_on(engine, input_ids, attention_mask, guidance=guidance, logprobs=steps, **gen_kwargs)
        if steps is None:
            return Samples(ids, None, self.version)
        if not steps:
            return Samples(ids, torch.zeros(ids.shape[0], 0), self.version)
        local = torch.stack(steps, dim=1).cpu() if steps[0] is not None else None  # (B, N) on the last stage
        return Samples(ids, from_last_stage(local, engine.ps), self.version)



def hf_named_weights(engine: Any, *, trainable_only: bool) -> NamedTensors:
    """(HF name, tensor) of the model, the TP/PP shards gathered on every rank (a collective:
    iterate to the end on every rank), the heads left out. ``trainable_only``: the HF tensors of
    the blocks with a parameter the optimizer updates, and of the other trained weights (the
    final norm above a frozen trunk; the embedding, and a head tied to it, only when trained)."""
    if engine.hf_config is None:
        raise RlkitError("named_weights: the model did not come from an HF model (no HF names to give); "
                         "use train.generator: null")
    return _named(engine, trainable_only)


def _trained(engine: Any) -> tuple[set[int], set[str]]:
    """The layers (whole-model numbering) with a trainable parameter, and the trainable
    parameters outside the layers, over every pipeline stage; the heads left out."""
    import torch.distributed as dist

    from rlkit_nemo.models.sharding import LAYER, _layer_offset, _renumber, _tensors

    offset = _layer_offset(engine.module)
    names = {_renumber(name, offset) for name, tensor in _tensors(engine.module).items()
             if isinstance(tensor, torch.nn.Parameter) and tensor.requires_grad and not name.startswith("heads.")}
    if engine.ps.get_pipeline_model_parallel_world_size() > 1:
        stages = [None] * engine.ps.get_pipeline_model_parallel_world_size()
        dist.all_gather_object(stages, names, group=engine.ps.get_pipeline_model_parallel_group())
        names = set().union(*stages)
    layers = {int(match.group(2)) for match in map(LAYER.match, names) if match}
    return layers, {name for name in names if not LAYER.match(name)}


def _named(engine: Any, trainable_only: bool) -> NamedTensors:
    from rlkit_nemo.convert import layer_to_hf, megatron_to_hf, top_to_hf
    from rlkit_nemo.models.sharding import full_state_dict
    from rlkit_nemo.te import local_name, te_to_local

    trained = _trained(engine) if trainable_only else None  # collective: before the gather, on every rank
    full = full_state_dict(engine.module)
    trunk = {k: v for k, v in full.items() if not k.startswith("heads.")}
    if trained is None:
        yield from megatron_to_hf(trunk, engine.hf_config).items()
        return
    layers, others = trained
    local = te_to_local(trunk)
    others = {local_name(name) for name in others}
    hf = top_to_hf({k: v for k, v in local.items() if k in others}, engine.hf_config)
    for i in sorted(layers):
        hf.update(layer_to_hf(local, i, engine.hf_config))
    for name, tensor in hf.items():
        yield name, tensor.detach().clone().contiguous()
