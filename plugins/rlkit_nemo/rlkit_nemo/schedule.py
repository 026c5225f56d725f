"""One optimisation step's forward and backward passes through Megatron's schedule.

Megatron's ``get_forward_backward_func`` picks the schedule for the parallel layout (no
pipelining, or 1F1B across pipeline stages with activations sent between ranks); rlkit only
supplies the forward step: run this stage of the model on a microbatch and, on the last
stage, the method's loss (:mod:`rlkit_nemo.losses`). Every stage reads the same microbatch
(the first stage for the tokens, the last for the loss, all for the attention mask).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Sequence

import torch

from rlkit_nemo.models.gpt import causal_padding_mask


def forward_backward(
    model: torch.nn.Module,
    microbatches: Sequence[Any],
    inputs: Callable[[Any], dict],
    loss: Callable[[Any, Any], tuple[torch.Tensor, dict]],
    *,
    forward_only: bool = False,
) -> list[dict]:
    """Forward (and unless ``forward_only``, backward) over ``microbatches`` of equal shape;
    gradients accumulate in ``model``. Returns each microbatch's loss stats on the last
    pipeline stage (and an empty list elsewhere); the loss is averaged over microbatches."""
    from megatron.core.pipeline_parallel import get_forward_backward_func

    def forward_step(data_iterator, stage):
        batch = next(data_iterator)
        x = inputs(batch)
        output = stage(
            x["input_ids"], x["position_ids"], causal_padding_mask(x["attention_mask"]), head_kwargs=x["head_kwargs"]
        )
        return output, partial(_loss_with_stats, loss, batch)

    first = inputs(microbatches[0])["input_ids"]
    return get_forward_backward_func()(
        forward_step_func=forward_step,
        data_iterator=iter(microbatches),
        model=model,
        num_microbatches=len(microbatches),
        seq_length=first.shape[1],
        micro_batch_size=first.shape[0],
        forward_only=forward_only,
    )


def _loss_with_stats(loss, batch, output):
    value, stats = loss(output, batch)
    return value, {"loss": value.detach().clone(), **stats}
