"""rlkit fills in the DeepSpeed config it launches with: batch sizes from train, clipping from
train.max_grad_norm or, when train sets none, the config's own (trlX's launch YAMLs clip at
1.0 there; rlkit used to overwrite it with 0, silently turning clipping off)."""

from types import SimpleNamespace

import pytest

from rlkit_accelerate.sharding import configure_deepspeed
from rlkit_core.errors import ConfigError


def accelerator(**ds_config):
    plugin = SimpleNamespace(deepspeed_config=dict(ds_config))
    return SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=plugin), num_processes=2)


def configured(max_grad_norm, **ds_config):
    acc = accelerator(**ds_config)
    configure_deepspeed(acc, 8, 4, max_grad_norm)
    return acc.state.deepspeed_plugin.deepspeed_config


def test_batch_sizes_come_from_train():
    config = configured(None, train_micro_batch_size_per_gpu="auto")
    assert config["train_micro_batch_size_per_gpu"] == 4 and config["gradient_accumulation_steps"] == 1
    assert config["train_batch_size"] == 8  # micro-batch x processes


@pytest.mark.parametrize("ds_clipping,max_grad_norm,expected", [
    ("auto", None, 0.0), ("auto", 0.5, 0.5), (None, 2.0, 2.0), (0.0, 1.0, 1.0),
    (1.0, None, 1.0),  # trlX's launch configs: the config's clipping stays
    (1.0, 1.0, 1.0),
])
def test_clipping_from_train_or_the_deepspeed_config(ds_clipping, max_grad_norm, expected):
    extra = {} if ds_clipping is None else {"gradient_clipping": ds_clipping}
    assert configured(max_grad_norm, **extra)["gradient_clipping"] == expected


def test_two_different_clippings_are_one_line():
    with pytest.raises(ConfigError, match=r"gradient_clipping: 1.0 conflicts with train.max_grad_norm: 0.5") as err:
        configured(0.5, gradient_clipping=1.0)
    assert "\n" not in str(err.value)
