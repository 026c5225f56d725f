"""Forward (and backward) passes through Megatron's schedule, for any forward kind.

Megatron's ``get_forward_backward_func`` picks the schedule for the parallel layout (no
pipelining, or 1F1B across pipeline stages with activations sent between ranks); rlkit
supplies the forward step: run this stage of the model on a micro-batch and, on the last
stage, compute the kind's outputs (:mod:`rlkit_nemo.forwards`) and hand them to ``loss``.
Every stage reads the same micro-batch (the first stage for the tokens, the last for the
outputs, all for the mask).
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from typing import Any, Callable, Sequence

import torch

from rlkit_nemo.forwards import kind_outputs, model_inputs
from rlkit_nemo.models.gpt import causal_padding_mask

Loss = Callable[[dict[str, Any], Any], tuple[torch.Tensor, dict[str, Any]]]


def call_model(model: torch.nn.Module, x: dict[str, Any]):
    """``model`` (one stage, or a whole PP=1 model) on :func:`rlkit_nemo.forwards.model_inputs`:
    the input ids and positions of the tokens to run (all of them, or a KV-cached step's new
    ones) and the mask of every key so far."""
    ids = x["input_ids"]
    mask = causal_padding_mask(x["attention_mask"], queries=ids.shape[1])
    return model(ids, x["position_ids"], mask, head_kwargs=x["head_kwargs"], **x.get("model_kwargs", {}))


def forward_backward(model: torch.nn.Module, microbatches: Sequence[Any], kind: str, loss: Loss, *,
                     forward_only: bool = False, autocast: torch.dtype | None = None,
                     timer: dict[str, float] | None = None) -> list[dict]:
    """Forward (and unless ``forward_only``, backward) over ``microbatches`` of equal shape;
    gradients accumulate in ``model``. Returns what ``loss`` returned as stats for each
    micro-batch on the last pipeline stage (an empty list elsewhere); the loss is averaged
    over micro-batches. ``timer["forward"]`` accumulates the forward passes' seconds."""
    from megatron.core.pipeline_parallel import get_forward_backward_func

    device_type = "cuda" if torch.cuda.is_available() else "cpu"
    # Megatron's linear layers re-enter the forward's autocast in their backward through
    # torch.amp.custom_bwd with device_type="cuda" only: on the CPU the whole schedule (forward
    # and backward) runs under autocast instead, which is what custom_bwd does on a GPU
    around_forward = autocast is not None and device_type == "cuda"
    around_schedule = autocast is not None and device_type == "cpu"

    def forward_step(data_iterator, stage):
        start = time.time()
        batch = next(data_iterator)
        with torch.autocast(device_type, dtype=autocast) if around_forward else nullcontext():
            output = call_model(stage, model_inputs(kind, batch))
        if timer is not None:
            timer["forward"] = timer.get("forward", 0.0) + time.time() - start

        def loss_func(output_tensor):
            start = time.time()
            value, stats = loss(kind_outputs(kind, output_tensor, batch), batch)
            if timer is not None:
                timer["forward"] = timer.get("forward", 0.0) + time.time() - start
            return value, stats

        return output, loss_func

    first = model_inputs(kind, microbatches[0])["input_ids"]
    with torch.autocast(device_type, dtype=autocast) if around_schedule else nullcontext():
        return get_forward_backward_func()(
            forward_step_func=forward_step,
            data_iterator=iter(microbatches),
            model=model,
            num_microbatches=len(microbatches),
            seq_length=first.shape[1],
            micro_batch_size=first.shape[0],
            forward_only=forward_only,
        )
