"""Forward (and backward) passes through Megatron's schedule, for any forward kind.

Megatron's ``get_forward_backward_func`` picks the schedule for the parallel layout (no
pipelining, or 1F1B across pipeline stages with activations sent between ranks); rlkit
supplies the forward step: run this stage of the model on a micro-batch and, on the last
stage, compute the kind's outputs (:mod:`rlkit_nemo.forwards`) and hand them to ``loss``.
Every stage reads the same micro-batch (the first stage for the tokens, the last for the
outputs, all for the mask). Micro-batches may differ in shape (each collated on its own):
under PP they are padded to one shape for the schedule and cut back on the last stage
(:mod:`rlkit_nemo.packing`, which also packs a micro-batch's rows into one sequence).
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from typing import Any, Callable, Sequence

import torch

from rlkit_nemo.forwards import kind_outputs, model_inputs
from rlkit_nemo.models.gpt import causal_padding_mask
from rlkit_nemo.packing import block_causal_mask, fit_inputs, input_shape, pack_inputs, trim_output

Loss = Callable[[dict[str, Any], Any], tuple[torch.Tensor, dict[str, Any]]]


def call_model(model: torch.nn.Module, x: dict[str, Any]):
    """``model`` (one stage, or a whole PP=1 model) on :func:`rlkit_nemo.forwards.model_inputs`:
    the input ids and positions of the tokens to run (all of them, or a KV-cached step's new
    ones) and the mask of every key so far."""
    ids = x["input_ids"]
    kwargs = dict(x.get("model_kwargs", {}))
    if "packed" in x:
        mask = block_causal_mask(x["packed"]["segments"])
        kwargs["packed"] = x["packed"]
    else:
        mask = causal_padding_mask(x["attention_mask"], queries=ids.shape[1])
    return model(ids, x["position_ids"], mask, head_kwargs=x["head_kwargs"], **kwargs)


def forward_backward(model: torch.nn.Module, microbatches: Sequence[Any], kind: str, loss: Loss, *,
                     forward_only: bool = False, autocast: torch.dtype | None = None,
                     timer: dict[str, float] | None = None, weights: Sequence[float] | None = None,
                     packing: bool = False) -> list[dict]:
    """Forward (and unless ``forward_only``, backward) over ``microbatches``; gradients
    accumulate in ``model``. Returns what ``loss`` returned as stats for each micro-batch on
    the last pipeline stage (an empty list elsewhere). Megatron averages the losses over
    micro-batches; ``weights`` (one per micro-batch) multiply them first. ``packing``: each
    micro-batch's rows run as one packed sequence. ``timer["forward"]`` accumulates the
    forward passes' seconds."""
    from megatron.core import parallel_state as ps
    from megatron.core.pipeline_parallel import get_forward_backward_func

    device_type = "cuda" if torch.cuda.is_available() else "cpu"
    # Megatron's linear layers re-enter the forward's autocast in their backward through
    # torch.amp.custom_bwd with device_type="cuda" only: on the CPU the whole schedule (forward
    # and backward) runs under autocast instead, which is what custom_bwd does on a GPU
    around_forward = autocast is not None and device_type == "cuda"
    around_schedule = autocast is not None and device_type == "cpu"

    inputs = [model_inputs(kind, b) for b in microbatches]
    if packing:
        inputs = [pack_inputs(x) for x in inputs]
    # the schedule sends one activation shape between stages: the longest and widest
    rows, length = (max(s) for s in zip(*map(input_shape, inputs)))
    if ps.get_pipeline_model_parallel_world_size() > 1:
        inputs = [fit_inputs(x, rows, length) for x in inputs]
    weights = [1.0] * len(inputs) if weights is None else list(weights)

    def forward_step(data_iterator, stage):
        start = time.time()
        batch, x, weight = next(data_iterator)
        with torch.autocast(device_type, dtype=autocast) if around_forward else nullcontext():
            output = call_model(stage, x)
        if timer is not None:
            timer["forward"] = timer.get("forward", 0.0) + time.time() - start

        def loss_func(output_tensor):
            start = time.time()
            value, stats = loss(kind_outputs(kind, trim_output(kind, output_tensor, x.get("trim")), batch), batch)
            if timer is not None:
                timer["forward"] = timer.get("forward", 0.0) + time.time() - start
            return value * weight if weight != 1.0 else value, stats

        return output, loss_func

    with torch.autocast(device_type, dtype=autocast) if around_schedule else nullcontext():
        return get_forward_backward_func()(
            forward_step_func=forward_step,
            data_iterator=iter(zip(microbatches, inputs, weights)),
            model=model,
            num_microbatches=len(microbatches),
            seq_length=length,
            micro_batch_size=rows,
            forward_only=forward_only,
        )
