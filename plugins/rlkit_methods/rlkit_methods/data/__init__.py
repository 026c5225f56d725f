"""Data: prompt pipeline, dialogue tokenization, file sources and micro-batching.

Submodules are imported on use (``PromptPipeline`` and the batching helpers need torch;
``sources`` and ``dialogue`` do not).
"""

import importlib

_EXPORTS = {
    "PromptPipeline": "rlkit_methods.data.prompts",
    "tokenize_dialogue": "rlkit_methods.data.dialogue",
    "DialogMessage": "rlkit_methods.data.dialogue",
    "file_source": "rlkit_methods.data.sources",
    "MiniBatchIterator": "rlkit_methods.data.batching",
    "micro_batches": "rlkit_methods.data.batching",
    "position_ids_from_mask": "rlkit_methods.data.padding",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'rlkit_methods.data' has no attribute {name!r}")
