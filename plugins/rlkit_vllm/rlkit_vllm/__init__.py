"""rlkit-vllm: a vLLM generator (``train.generator: vllm``, :mod:`rlkit_vllm.generator`)."""
