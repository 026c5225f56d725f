"""rlkit_methods.engine_kit: the plumbing engines share, written once."""

import dataclasses
from typing import NamedTuple

import pytest
import torch

from rlkit_methods import engine_kit
from rlkit_methods.engine_kit import mean_stats, to_cpu, to_device


@dataclasses.dataclass
class Batch:
    input_ids: torch.Tensor
    extras: dict
    size: int = 0
    rows: int = dataclasses.field(init=False, default=-1)  # set after construction, not an argument


class Heads(NamedTuple):
    qs: tuple
    vs: torch.Tensor


def meta(t):
    return t.to("meta")


def test_every_structure_a_batch_or_output_holds_is_walked():
    batch = Batch(torch.ones(2, 3), {"trunk": [torch.zeros(1)], "qs": (torch.ones(1), torch.ones(2)), "name": "x"}, size=2)
    moved = engine_kit.map_tensors(meta, batch)
    assert isinstance(moved, Batch) and moved.input_ids.is_meta and moved.size == 2 and moved.rows == -1
    assert moved.extras["trunk"][0].is_meta and moved.extras["name"] == "x"
    assert isinstance(moved.extras["qs"], tuple) and all(q.is_meta for q in moved.extras["qs"])  # tuples too (accelerate's did not)
    heads = engine_kit.map_tensors(meta, Heads((torch.ones(1),), torch.ones(1)))
    assert type(heads) is Heads and heads.qs[0].is_meta and heads.vs.is_meta
    assert engine_kit.map_tensors(meta, Batch) is Batch  # a dataclass type is not an instance


def test_to_cpu_detaches_and_to_device_keeps_the_graph():
    w = torch.ones(2, requires_grad=True)
    out = to_cpu({"logprobs": w * 2, "qs": (w * 3,)})
    assert not out["logprobs"].requires_grad and not out["qs"][0].requires_grad
    assert to_device({"x": w * 2}, "cpu")["x"].requires_grad


def test_both_engines_move_batches_with_the_kit():
    from rlkit_accelerate import engine as accelerate_engine
    from rlkit_nemo import forwards as nemo_forwards

    assert accelerate_engine.to_device is nemo_forwards.to_device is to_device
    assert accelerate_engine.to_cpu is nemo_forwards.to_cpu is to_cpu


def test_mean_stats_weights_each_micro_batch():
    stats = [{"loss": 1.0, "kl": 0.5}, {"loss": 4.0}]
    assert mean_stats(stats) == {"loss": 2.5, "kl": 0.5}
    assert mean_stats(stats, weights=[3, 1]) == {"loss": pytest.approx(1.75), "kl": 0.5}
    assert mean_stats([]) == {}
    with pytest.raises(ValueError, match="mean_stats: 1 weights for 2 stats dicts"):
        mean_stats(stats, weights=[1])


def test_the_kit_names_what_it_exports():
    assert sorted(engine_kit.__all__) == sorted(
        name for name in vars(engine_kit) if not name.startswith("_") and name not in {"annotations", "dataclasses", "torch", "Any", "Callable", "Mapping", "Sequence"})
    for name in engine_kit.__all__:
        assert f":func:`{name}`" in engine_kit.__doc__ or f":data:`{name}`" in engine_kit.__doc__, name
