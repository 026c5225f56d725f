"""Entry point of rlkit-nemo: the ``nemo`` backend, its engine and trlX's trainer names.

Everything is named by import strings and the modules import NeMo and megatron-core only when
an engine is built, so the plugin loads whether or not NeMo is installed; selecting a trainer
without megatron-core is a one-line error saying ``install rlkit-nemo[nemo]``.
"""

from rlkit_core import BackendSpec, TrainerSpec, hookimpl

_T = "rlkit_nemo.trainers"


@hookimpl
def rlkit_register_backends():
    return [
        BackendSpec(
            "nemo",
            engine="rlkit_nemo.engine:MegatronEngine",
            # trlX's names (NeMoPPOTrainer, NeMoILQLTrainer, NeMoSFTTrainer) and the same pattern for RFT, GRPO and RLOO
            trainers=[TrainerSpec(f"NeMo{m}Trainer", f"{_T}:NeMo{m}Trainer", method=m.lower())
                      for m in ("PPO", "ILQL", "SFT", "RFT", "GRPO", "RLOO")],
            description="NeMo 2 + megatron-core (tensor/pipeline/data parallel)",
        )
    ]


@hookimpl
def rlkit_check_config(config):
    """The Megatron YAML of a config that runs on the NeMo engine, before a model is loaded."""
    from rlkit_nemo.checks import check_config

    return check_config(config)
