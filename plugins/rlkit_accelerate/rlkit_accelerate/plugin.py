"""Entry point of rlkit-accelerate: the ``accelerate`` backend.

The engine is named by an import string and everything heavy is imported inside functions,
so listing plugins imports neither torch nor transformers. Its trainers are every installed
method's trainer on the engine, under trlX's names (``AcceleratePPOTrainer``, ...;
:mod:`rlkit_core.pairing`).
"""

from rlkit_core import BackendSpec, hookimpl


@hookimpl
def rlkit_register_backends():
    return [
        BackendSpec(
            "accelerate",
            engine="rlkit_accelerate.engine:AccelerateEngine",
            trainer_prefix="Accelerate",
            description="HF transformers + accelerate (DDP, DeepSpeed, FSDP)",
        )
    ]
