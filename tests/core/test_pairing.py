"""One pairing mechanism (rlkit_core.pairing): every built-in method registers its trainer, so
every registered engine runs every method, and trlX's class names are those pairs."""

import inspect
import pickle

import pytest

from rlkit_core import BackendSpec, TrainerSpec, hookimpl
from rlkit_core.errors import ConfigError
from rlkit_core.loading import get_trainer

BUILT_IN = {"PPO": "ppo", "ILQL": "ilql", "SFT": "sft", "RFT": "rft", "GRPO": "grpo", "RLOO": "rloo"}


class Built(Exception):
    """Raised by the test engine: the trainer got as far as building its engine."""


class TpuEngine:
    def __init__(self, config, mesh=None, **kwargs):
        raise Built(dict(kwargs, mesh=mesh))


class TpuBackend:
    def __init__(self, requires=None, trainers=()):
        self.requires, self.trainers = requires, trainers

    @hookimpl
    def rlkit_register_backends(self):
        return [BackendSpec("tpu", engine=TpuEngine, requires=self.requires, trainers=self.trainers)]


def test_a_new_engine_runs_every_built_in_method_without_trainer_code(rlkit_host, register_plugin):
    register_plugin(TpuBackend())
    registry = rlkit_host.registry
    for stem, method in BUILT_IN.items():
        spec = registry.get("trainer", f"Tpu{stem}Trainer")
        assert (spec.backend, spec.method) == ("tpu", method)
    assert {f"Tpu{stem}Trainer" for stem in BUILT_IN} <= set(registry.names("trainer"))


def test_the_engines_keywords_reach_the_engine_and_trlx_keywords_the_trainer(rlkit_host, register_plugin):
    from rlkit_methods import default_ilql_config
    from rlkit_methods.ilql.trainer import ILQLTrainer

    register_plugin(TpuBackend())
    cls = get_trainer("tpuilqltrainer")
    assert cls.__name__ == "TpuILQLTrainer" and issubclass(cls, ILQLTrainer) and cls.engine_class is TpuEngine
    params = inspect.signature(cls).parameters
    assert list(params)[:1] == ["config"] and {"reward_fn", "metric_fn", "stop_sequences", "logit_mask", "train_mode", "mesh"} <= set(params)
    with pytest.raises(Built) as built:
        cls(default_ilql_config(), mesh=(2, 4), train_mode=False, metric_fn=len)
    assert built.value.args[0] == {"mesh": (2, 4)}  # trlX's keywords stay with the trainer


def test_a_positional_argument_after_config_is_refused_in_one_line(rlkit_host):
    from rlkit_methods import default_ppo_config

    cls = get_trainer("NeMoPPOTrainer")
    with pytest.raises(TypeError) as err:
        cls(default_ppo_config(), len)  # trlX's NeMoPPOTrainer took metric_fn here, its ILQL reward_fn
    assert str(err.value).startswith("NeMoPPOTrainer: pass the arguments after config by keyword (megatron_cfg, pretrained_model,")
    assert "\n" not in str(err.value)


def test_requires_runs_before_anything_is_built(rlkit_host, register_plugin):
    from rlkit_methods import default_sft_config

    def requires(what):
        raise ConfigError(f"{what} needs the TPU runtime; pip install tpu-runtime")

    register_plugin(TpuBackend(requires=requires))
    with pytest.raises(ConfigError, match=r"^train.trainer: TpuSFTTrainer needs the TPU runtime"):
        get_trainer("TpuSFTTrainer")(default_sft_config())


def test_a_backends_own_trainer_class_is_chosen_before_its_pair(rlkit_host, register_plugin):
    class Handwritten:
        pass

    register_plugin(TpuBackend(trainers=[TrainerSpec("TpuPPOTrainer", Handwritten, method="ppo")]))
    assert get_trainer("TpuPPOTrainer") is Handwritten
    assert [n for n in rlkit_host.registry.names("trainer") if n == "TpuPPOTrainer"] == ["TpuPPOTrainer"]


def test_trlx_names_are_one_class_however_reached(rlkit_host):
    import rlkit_nemo
    from rlkit_accelerate.trainers import AccelerateILQLTrainer, AcceleratePPOTrainer, AccelerateSFTTrainer
    from rlkit_methods.ppo.trainer import PPOTrainer
    from rlkit_nemo.trainers import NeMoSFTTrainer

    assert get_trainer("AcceleratePPOTrainer") is AcceleratePPOTrainer and issubclass(AcceleratePPOTrainer, PPOTrainer)
    assert {AccelerateILQLTrainer.__name__, AccelerateSFTTrainer.__name__} == {"AccelerateILQLTrainer", "AccelerateSFTTrainer"}
    assert rlkit_nemo.NeMoSFTTrainer is NeMoSFTTrainer is get_trainer("nemosfttrainer")
    assert pickle.loads(pickle.dumps(AcceleratePPOTrainer)) is AcceleratePPOTrainer  # its __module__ resolves it
    nemo = inspect.signature(rlkit_nemo.NeMoILQLTrainer).parameters
    assert {"megatron_cfg", "pretrained_model", "train_mode"} <= set(nemo)
    assert "megatron_cfg" not in inspect.signature(AcceleratePPOTrainer).parameters
    with pytest.raises(AttributeError, match="has no attribute 'NeMoPPOTrainer'"):
        import rlkit_accelerate.trainers as accelerate_trainers

        accelerate_trainers.NeMoPPOTrainer  # noqa: B018 (another backend's pair)

