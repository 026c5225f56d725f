"""Entry point of rlkit-nemo: the ``nemo`` backend and its engine.

Everything is named by import strings and the modules import NeMo and megatron-core only when
an engine is built, so the plugin loads whether or not NeMo is installed. Its trainers are every
installed method's trainer on the engine under trlX's names (``NeMoPPOTrainer``,
``NeMoILQLTrainer``, ...; :mod:`rlkit_core.pairing`); selecting one without megatron-core is a
one-line error saying ``install rlkit-nemo[nemo]``.
"""

from rlkit_core import BackendSpec, hookimpl


@hookimpl
def rlkit_register_backends():
    return [
        BackendSpec(
            "nemo",
            engine="rlkit_nemo.engine:MegatronEngine",
            trainer_prefix="NeMo",
            requires="rlkit_nemo.config_checks:require_megatron",
            description="NeMo 2 + megatron-core (tensor/pipeline/data parallel)",
        )
    ]


@hookimpl
def rlkit_check_config(config):
    """The Megatron YAML of a config that runs on the NeMo engine, before a model is loaded."""
    from rlkit_nemo.config_checks import check_config

    return check_config(config)
