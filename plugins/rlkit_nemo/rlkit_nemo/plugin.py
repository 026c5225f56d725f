"""Entry point of rlkit-nemo. Registers the ``nemo`` backend.

It imports neither NeMo nor megatron-core, so it loads whether or not they are installed;
the trainers land with the NeMo work.
"""

from rlkit_core import BackendSpec, hookimpl


@hookimpl
def rlkit_register_backends():
    return [BackendSpec("nemo", description="NeMo 2 + megatron-core (tensor/pipeline parallel)")]
