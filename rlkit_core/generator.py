"""The generator interface: the sampling side, beside the engine (the training side).

The engine (:mod:`rlkit_core.engine`) trains; a generator samples. Every engine offers its own
sampler as the default generator (``engine.default_generator()``: it shares the engine's
weights, so keeping it in sync costs nothing); an inference engine (vLLM, in this process or
another) is a generator with its own copy of the weights, which the loop keeps up to date.
This module is a specification (no torch import): :class:`Samples`, :class:`WeightUpdate`,
the :class:`Generator` protocol, and :func:`make_generator`, which the loop uses to pick one
(``train.generator``). The kit :mod:`rlkit_core.testing.generator` checks any generator.

The contract
------------
* ``generate`` is collective like the engine's calls: every rank calls it, in the same order;
  data-parallel ranks may get different lengths, the ranks of one tensor/pipeline-parallel
  replica must get the same samples (they hold the same data: the engine's forwards mix their
  inputs). Tensors go in and come out on the CPU.
* ``Samples.logprobs[b, t]`` is ``log softmax(z_t)[y_t]``: ``y_t`` the ``t``-th new token of row
  ``b``, ``z_t`` the model's logits at the position that predicts it, *unprocessed*: no
  temperature, top-k, top-p, penalties or Q-guidance. It is the distribution the training
  engine's ``"response"`` forward computes (temperature 1), so the two can be compared token by
  token (:func:`logprob_gap`). Positions after a row's EOS (padding) hold 0. ``None`` where the
  sampler cannot report them (beam search; Q-guided decoding).
* After ``update_weights(update)`` returns, the next ``generate`` samples from exactly the
  policy of ``update.version``. The loop calls it on every rank after every optimizer step
  (every step changes the sampling policy), after a checkpoint is loaded, and once when the
  generator is made (``full=True``).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Protocol, runtime_checkable

import attrs

from rlkit_core.errors import ConfigError, RlkitError

NamedTensors = Iterator[tuple[str, Any]]


@attrs.frozen
class Samples:
    """What a generator returns for B left-padded prompts of width Q.

    ``ids`` (B, Q + N): the prompts, then the new tokens, padding after EOS (what
    ``Engine.generate`` returns). ``logprobs`` (B, N) float32 or None: see the module's
    contract. ``version``: the policy version (optimizer steps taken) that sampled them."""

    ids: Any
    logprobs: Any = None
    version: int = 0


@attrs.frozen
class WeightUpdate:
    """New weights from the training engine, pulled only by a generator that needs them.

    ``version``: the optimizer steps the engine has taken. ``full``: every weight is offered
    (the first sync, after a resume); otherwise only those the optimizer may have changed (the
    trainable ones: a frozen trunk is never sent again). ``weights()`` yields ``(HF name,
    tensor)`` pairs, the names those of the HF model the engine exports
    (``transformer.h.0.attn.c_attn.weight``), gathered whole where the engine shards; a
    tensor is valid while the iteration runs (copy what you keep). It is collective on a
    sharding engine: call it on every rank, at the same point (at once, or before the next
    ``generate``, which every rank calls together). The default generator never calls it."""

    version: int
    weights: Callable[[], NamedTensors]
    full: bool = False


@runtime_checkable
class Generator(Protocol):
    """A sampler the loop asks for rollouts and evaluation samples."""

    def generate(self, input_ids, attention_mask, *, guidance: Any = None, **gen_kwargs) -> Samples:
        """Sample continuations of left-padded prompts (B, Q). ``gen_kwargs`` are HF
        ``generate``'s (``max_new_tokens``, ``do_sample``, ``top_k``, ``top_p``,
        ``temperature``, ``eos_token_id``, ``pad_token_id``...); eval mode, whole weights.
        ``guidance`` (:class:`rlkit_core.engine.QGuidance`) steers a model with ILQL heads; a
        generator without them refuses it in one line."""

    def update_weights(self, update: WeightUpdate) -> None:
        """Take the engine's weights of ``update.version`` (see :class:`WeightUpdate`)."""

    def release(self) -> None:
        """Free the memory sampling holds (KV cache, a copy of the weights) for training. The
        loop calls it before every optimizer step, so it must be cheap when already released;
        nothing to do for a generator that shares the engine's weights."""

    def reclaim(self) -> None:
        """Take back what ``release`` freed. ``generate`` on a released generator reclaims
        first; calling it ahead lets the wake-up overlap other work."""

    def close(self) -> None:
        """Stop for good (a generator process ends); further calls are errors."""


class SharedWeightsGenerator:
    """Base of a generator that samples with the training engine's own weights (each engine's
    default generator): an update is already the new policy, so it only records the version;
    there is no memory of its own to release and nothing to close."""

    def __init__(self, engine: Any):
        self.engine = engine
        self.version = 0

    def update_weights(self, update: WeightUpdate) -> None:
        self.version = update.version

    def release(self) -> None:
        pass

    def reclaim(self) -> None:
        pass

    def close(self) -> None:
        pass


class EngineSampler(SharedWeightsGenerator):
    """The generator of an engine that offers no ``default_generator``: its ``generate``,
    without log-probs."""

    def generate(self, input_ids, attention_mask=None, *, guidance: Any = None, **gen_kwargs) -> Samples:
        extra = {"guidance": guidance} if guidance is not None else {}
        return Samples(self.engine.generate(input_ids, attention_mask, **extra, **gen_kwargs), None, self.version)


def make_generator(engine: Any, choice: str | None, kwargs: dict[str, Any] | None = None) -> Generator:
    """The generator ``train.generator`` names for ``engine``: null -> the engine's own sampler
    (``engine.default_generator()``); a name a plugin registers (``vllm``,
    :class:`rlkit_core.registry.GeneratorSpec`) or ``"module:attribute"`` -> that factory
    called as ``factory(engine, **kwargs)`` (``train.generator_kwargs``)."""
    from rlkit_core.errors import RegistryError
    from rlkit_core.registry import load_target

    if choice is None:
        if kwargs:
            raise ConfigError("train.generator_kwargs: given without train.generator; name the generator they are for")
        default = getattr(engine, "default_generator", None)
        return default() if default is not None else EngineSampler(engine)
    if ":" in choice:
        target = choice
    else:
        from rlkit_core.plugins import get_registry

        registry = get_registry()
        spec = registry.find("generator", choice)
        if spec is None:
            installed = ", ".join(registry.names("generator")) or "none installed"
            raise ConfigError(f"train.generator: {choice!r} is not a known generator ({installed}); use null (the "
                              f"engine's sampler), a registered name, or a factory as 'module:attribute'")
        target = spec.factory
    try:
        factory = load_target(target, what="train.generator")
    except RegistryError as exc:
        raise ConfigError(str(exc)) from None
    generator = factory(engine, **(kwargs or {}))
    if not isinstance(generator, Generator):
        raise ConfigError(f"train.generator: {choice} returned {type(generator).__name__}, which lacks members of "
                          f"rlkit_core.generator.Generator (generate, update_weights, release, reclaim, close)")
    return generator


def named_weights(engine: Any, *, trainable_only: bool) -> NamedTensors:
    """``engine.named_weights(trainable_only=...)``, or a one-line error for an engine without it."""
    method = getattr(engine, "named_weights", None)
    if method is None:
        raise RlkitError(f"{type(engine).__name__} offers no named_weights(); a generator with its own weights "
                         f"cannot be kept in sync with it (use train.generator: null)")
    return method(trainable_only=trainable_only)


def logprob_gap(generator_logprobs, trainer_logprobs, mask) -> dict[str, float]:
    """How far the generator's log-probs are from the trainer's over the tokens that count:
    ``max`` and ``mean`` of |generator - trainer| where ``mask`` (B, N) is 1. For a run to log
    every phase (``policy/logprob_gap_max``, ``policy/logprob_gap_mean``)."""
    mask = mask.to(trainer_logprobs.dtype)
    gap = (generator_logprobs.to(trainer_logprobs.dtype) - trainer_logprobs).abs() * mask
    count = float(mask.sum())
    if count == 0:
        return {"policy/logprob_gap_max": 0.0, "policy/logprob_gap_mean": 0.0}
    return {"policy/logprob_gap_max": float(gap.max()), "policy/logprob_gap_mean": float(gap.sum()) / count}


def real_response_mask(new_tokens, eos_token_id):
    """(B, N) 1 for each new token up to and including the row's first EOS, 0 after it (the
    padding a sampler writes once a row has ended); all ones when there is no EOS id."""
    import torch

    if eos_token_id is None:
        return torch.ones_like(new_tokens, dtype=torch.float32)
    eos = torch.as_tensor(eos_token_id, device=new_tokens.device).reshape(-1)
    is_eos = torch.isin(new_tokens, eos).long()
    ended_before = (is_eos.cumsum(1) - is_eos) > 0  # an EOS strictly before t
    return (~ended_before).float()
