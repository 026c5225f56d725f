"""Third-party output that tells a user nothing, silenced where it arises and nowhere else.

* transformers' progress bars while the GGUF is converted and the model written once
  ("Converting and de-quantizing GGUF tensors", "Loading weights", "Writing model shards"),
  and on every model load: :func:`no_transformers_progress` around that work.
* DeepSpeed's "Setting accelerator to CPU. If you have GPU or other accelerator, we were
  unable to detect it.", printed when accelerate imports DeepSpeed (``unwrap_model``) on a
  machine without CUDA: :func:`deepspeed_on_cpu_quietly` tells DeepSpeed the accelerator
  (``DS_ACCELERATOR=cpu``) when torch sees no CUDA, which is what it would detect anyway.
* transformers' "We strongly recommend passing in an `attention_mask` since your input_ids may
  be padded" while rlkit samples: :func:`no_padding_warning` around the engine's generate.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Any, Iterator


@contextmanager
def no_transformers_progress() -> Iterator[None]:
    """transformers' tqdm bars off inside, restored after. The GGUF reader calls ``tqdm``
    directly, ignoring that switch, so its module's ``tqdm`` is a disabled one meanwhile."""
    from functools import partial

    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    gguf_tqdm = getattr(gguf_utils, "tqdm", None)
    if gguf_tqdm is not None:
        gguf_utils.tqdm = partial(gguf_tqdm, disable=True)
    try:
        yield
    finally:
        if gguf_tqdm is not None:
            gguf_utils.tqdm = gguf_tqdm
        if was_enabled:
            hf_logging.enable_progress_bar()


def deepspeed_on_cpu_quietly() -> None:
    """Set ``DS_ACCELERATOR=cpu`` before DeepSpeed is first imported, only where torch sees no
    CUDA device and the user has not chosen an accelerator."""
    if "deepspeed" in sys.modules or "DS_ACCELERATOR" in os.environ:
        return
    import torch

    if not torch.cuda.is_available():
        os.environ["DS_ACCELERATOR"] = "cpu"


WARN_IF_PADDING = "warn_if_padding_and_no_attention_mask"


def _no_padding_warning(input_ids: Any, attention_mask: Any) -> None:
    return None


@contextmanager
def no_padding_warning(model: Any) -> Iterator[None]:
    """transformers' padding warning off for the models inside ``model``, and only for them,
    while rlkit generates. rlkit always hands ``generate`` an attention mask, but transformers
    5 does not pass it on to the forward of each decoding step; a sampled token that equals the
    pad id (an untrained randomwalks model samples its pad, 22) then makes the model warn about a
    mask it was given. The check is shadowed on those instances and restored after: the user's
    own calls, and their one-time warning, are untouched."""
    from transformers import PreTrainedModel

    shadowed = [m for m in model.modules() if isinstance(m, PreTrainedModel) and WARN_IF_PADDING not in vars(m)]
    for module in shadowed:
        vars(module)[WARN_IF_PADDING] = _no_padding_warning
    try:
        yield
    finally:
        for module in shadowed:
            vars(module).pop(WARN_IF_PADDING, None)
