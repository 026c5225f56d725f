"""Entry point of rlkit-vllm: the ``vllm`` generator.

Named by import string, so the plugin loads (and ``rlkit plugins`` lists it) without vLLM;
choosing it without vLLM, or with a version it cannot use, is a one-line error
(:func:`rlkit_vllm.checks.require_vllm`).
"""

from rlkit_core import GeneratorSpec, hookimpl


@hookimpl
def rlkit_register_generators():
    return [GeneratorSpec("vllm", "rlkit_vllm.generator:vllm_generator",
                          description="vLLM in the trainer's process or its own (generator_kwargs.placement), "
                                      "synced after every optimizer step")]
