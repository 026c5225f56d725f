"""rlkit_core.generator without an engine: choosing a generator, the fallback for engines
without a sampler of their own, the response mask and the log-prob gap."""

import pytest
import torch

from rlkit_core.errors import ConfigError, RlkitError
from rlkit_core.plugins import PluginHost, hookimpl, set_host
from rlkit_core.registry import GeneratorSpec
from rlkit_core.generator import (
    EngineSampler,
    Generator,
    Samples,
    WeightUpdate,
    logprob_gap,
    make_generator,
    named_weights,
    real_response_mask,
)


class BareEngine:
    """An engine that predates the seam: generate only."""

    def generate(self, input_ids, attention_mask=None, **gen_kwargs):
        return torch.cat([input_ids, torch.full((input_ids.shape[0], 2), 7)], dim=1)


def not_a_generator(engine):
    return object()


def test_an_engine_without_a_default_generator_gets_its_generate_wrapped():
    generator = make_generator(BareEngine(), None)
    assert isinstance(generator, EngineSampler) and isinstance(generator, Generator)
    generator.update_weights(WeightUpdate(version=3, weights=lambda: pytest.fail("pulled weights it shares")))
    samples = generator.generate(torch.tensor([[1, 2]]), None, max_new_tokens=2)
    assert samples.ids.tolist() == [[1, 2, 7, 7]] and samples.logprobs is None and samples.version == 3


def test_a_factory_is_called_with_the_engine_and_must_make_a_generator():
    engine = BareEngine()
    made = make_generator(engine, "rlkit_core.generator:EngineSampler")
    assert isinstance(made, EngineSampler) and made.engine is engine
    with pytest.raises(ConfigError, match="train.generator: .*not_a_generator returned object, which lacks members"):
        make_generator(engine, f"{__name__}:not_a_generator")
    with pytest.raises(ConfigError, match=r"train.generator: 'vllm' is not a known generator \(none installed\); use null"):
        make_generator(engine, "vllm")
    with pytest.raises(ConfigError, match="train.generator 'nowhere.at_all:make': cannot import nowhere"):
        make_generator(engine, "nowhere.at_all:make")


class WithKwargs(EngineSampler):
    def __init__(self, engine, *, width=1):
        super().__init__(engine)
        self.width = width


class GeneratorPlugin:
    @hookimpl
    def rlkit_register_generators(self):
        return [GeneratorSpec("widths", f"{__name__}:WithKwargs")]


def test_a_registered_generator_is_chosen_by_name_with_its_kwargs():
    host = PluginHost(load_entry_points=False)
    host.register(GeneratorPlugin(), "widths-plugin")
    previous = set_host(host)
    try:
        made = make_generator(BareEngine(), "Widths", {"width": 3})
        assert isinstance(made, WithKwargs) and made.width == 3
        with pytest.raises(ConfigError, match=r"'vllm' is not a known generator \(widths\)"):
            make_generator(BareEngine(), "vllm")
    finally:
        set_host(previous)
    with pytest.raises(ConfigError, match="train.generator_kwargs: given without train.generator"):
        make_generator(BareEngine(), None, {"width": 3})


def test_an_engine_without_named_weights_is_a_one_line_error():
    with pytest.raises(RlkitError, match="BareEngine offers no named_weights"):
        named_weights(BareEngine(), trainable_only=True)


def test_the_response_mask_ends_after_the_first_eos():
    new = torch.tensor([[5, 1, 1, 1], [5, 6, 7, 8], [1, 0, 0, 0]])
    assert real_response_mask(new, 1).tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]]
    assert real_response_mask(new, [7, 1]).tolist() == [[1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0]]
    assert real_response_mask(new, None).tolist() == [[1] * 4] * 3


def test_logprob_gap_over_the_response_mask():
    a = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, -0.5, -0.5]])
    b = torch.tensor([[-1.5, -2.0, -9.0], [-0.5, -0.25, -0.5]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    assert logprob_gap(a, b, mask) == {"policy/logprob_gap_max": 0.5, "policy/logprob_gap_mean": 0.75 / 5}
    assert logprob_gap(a, b, torch.zeros_like(mask)) == {"policy/logprob_gap_max": 0.0, "policy/logprob_gap_mean": 0.0}
    assert Samples(a).version == 0
