"""The generator conformance kit: checks any generator (``rlkit_core.generator.Generator``)
against the training engine it samples for, so a generator plugin's tests can call the same
checks the engines' default generators pass.

Each check takes a built trainer (``rlkit_core.train(...)`` or a pairing's constructor) whose
``generator`` is the one under test, and prompts as strings. Log-probs are compared with the
engine's ``"response"`` forward on the same weights, over the real response tokens (up to and
including EOS): in fp32 they agree within ``LOGPROB_ATOL`` (a KV cache and a full pass differ
by float rounding, ~1e-6 on the kit's tiny models).

:class:`HFCopyGenerator` is a generator with its own copy of the weights (a plain transformers
model loaded from the engine's export, kept in sync through ``update_weights``): the shape of an
inference-engine generator, small enough for CPU tests, and what the sync checks run against.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from rlkit_core.generator import Generator, Samples, WeightUpdate, real_response_mask

LOGPROB_ATOL = 1e-4


def check_generator_protocol(generator: Any) -> None:
    """Every member of :class:`Generator`."""
    assert isinstance(generator, Generator), f"{type(generator).__name__} lacks members of rlkit_core.generator.Generator"


def _prompts(trainer, prompts: list[str]):
    return trainer.tokenizer(prompts, return_tensors="pt", padding=True)


def check_generator_samples(trainer: Any, prompts: list[str], *, max_new_tokens: int = 6) -> Samples:
    """Prompt + new tokens (B, Q + N), the prompts unchanged, N <= ``max_new_tokens``, the
    policy version of the trainer's step, finite log-probs <= 0 of shape (B, N), 0 after EOS;
    decoded outputs cut at the trainer's stop sequences."""
    import torch

    batch = _prompts(trainer, prompts)
    samples = trainer.sample(batch["input_ids"], batch["attention_mask"], max_new_tokens=max_new_tokens)
    ids, Q = samples.ids, batch["input_ids"].shape[1]
    assert isinstance(samples, Samples), type(samples)
    assert ids.shape[0] == len(prompts) and Q < ids.shape[1] <= Q + max_new_tokens, ids.shape
    assert torch.equal(ids[:, :Q], batch["input_ids"]), "the prompts were changed"
    assert samples.version == trainer.iter_count, (samples.version, trainer.iter_count)
    if samples.logprobs is not None:
        lp, new = samples.logprobs, ids[:, Q:]
        assert lp.shape == new.shape and lp.dtype == torch.float32, (lp.shape, lp.dtype)
        assert bool(torch.isfinite(lp).all()) and bool((lp <= 0).all()), lp
        real = real_response_mask(new, trainer.generate_kwargs.get("eos_token_id"))
        assert bool((lp[real == 0] == 0).all()), "log-probs after EOS are not 0"
    sizes = [int(m.sum()) for m in batch["attention_mask"]]
    rows = [row[m.bool()].tolist() for row, m in zip(batch["input_ids"], batch["attention_mask"])]
    _, _, outputs = trainer.decode(rows, [r + ids[i, Q:].tolist() for i, r in enumerate(rows)], sizes)
    for output in outputs:
        assert not any(stop in output for stop in trainer.stop_sequences), (output, trainer.stop_sequences)
    return samples


def check_generator_logprobs(trainer: Any, prompts: list[str], *, max_new_tokens: int = 6, atol: float = LOGPROB_ATOL,
                             **gen_kwargs) -> float:
    """The log-probs the generator returns for what it sampled (``gen_kwargs`` on top of the
    run's) equal the engine's ``"response"`` forward of the same tokens within ``atol`` (fp32).
    Returns the largest difference."""
    import torch

    batch = _prompts(trainer, prompts)
    samples = trainer.sample(batch["input_ids"], batch["attention_mask"], max_new_tokens=max_new_tokens,
                             **{"do_sample": True, **gen_kwargs})
    assert samples.logprobs is not None, f"{type(trainer.generator).__name__} returned no log-probs"
    Q = batch["input_ids"].shape[1]
    new = samples.ids[:, Q:]
    real = real_response_mask(new, trainer.generate_kwargs.get("eos_token_id"))
    out = trainer.engine.forward("response", {"query_tensors": batch["input_ids"], "response_tensors": new,
                                              "attention_mask": torch.cat([batch["attention_mask"], real.long()], dim=1)})
    gap = float(((samples.logprobs - out["logprobs"]).abs() * real).max())
    assert gap <= atol, f"generator log-probs differ from the engine's by {gap:.3g} (> {atol})"
    return gap


def check_generator_follows_updates(trainer: Any, generator: Any, prompts: list[str], *, steps: int = 2,
                                    atol: float = LOGPROB_ATOL) -> float:
    """``generator`` made the trainer's, synced in full, then ``steps`` optimizer steps, each
    followed by the loop's sync: it samples from exactly the trained policy (log-probs equal
    the engine's within ``atol``) of the last step's version. A skipped or stale sync fails.
    The trainer needs a store (train it for a step first). Returns the largest difference."""
    trainer.generator = generator
    trainer.sync_generator(full=True)
    batch = list(range(min(len(trainer.store), trainer.engine.batch_sizes()[0])))
    for _ in range(steps):
        trainer.train_step(batch)
        trainer.iter_count += 1
        trainer.sync_generator()
    gap = check_generator_logprobs(trainer, prompts, atol=atol)
    one = _prompts(trainer, prompts[:1])
    version = generator.generate(one["input_ids"], one["attention_mask"], max_new_tokens=1).version
    assert version == trainer.iter_count, f"samples of version {version} after step {trainer.iter_count}"
    return gap


def check_export_generates_generated(trainer: Any, folder: Path, prompts: list[str], *, max_new_tokens: int = 6) -> None:
    """The HF export loads in plain transformers and greedy-generates what the generator does."""
    import torch
    from transformers import AutoModelForCausalLM

    trainer.save_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    tok = trainer.tokenizer
    batch = _prompts(trainer, prompts)
    greedy = dict(max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    ours = trainer.generator.generate(batch["input_ids"], batch["attention_mask"], **greedy).ids
    with torch.no_grad():
        theirs = model.generate(**batch, **greedy)
    n = min(ours.shape[1], theirs.shape[1])
    assert torch.equal(ours[:, :n], theirs[:, :n]), (ours, theirs)


class HFCopyGenerator:
    """A generator holding its own copy of the weights: the engine's HF export loaded in plain
    transformers, updated in place from ``WeightUpdate.weights()``. Log-probs from HF
    ``generate``'s unprocessed logits (``output_logits``)."""

    def __init__(self, engine: Any, folder: str | Path | None = None):
        from transformers import AutoModelForCausalLM

        folder = Path(folder or tempfile.mkdtemp(prefix="rlkit-copy-generator-"))
        engine.export(folder)  # every rank
        self.model = AutoModelForCausalLM.from_pretrained(folder).eval()
        self.tokenizer = engine.tokenizer
        self.version, self.calls, self.closed = 0, 0, False

    def update_weights(self, update: WeightUpdate) -> None:
        import torch

        params = dict(self.model.named_parameters(remove_duplicate=False))  # tied weights under each name
        with torch.no_grad():
            for name, tensor in update.weights():
                assert name in params, f"update_weights: the model has no weight {name!r}"
                params[name].copy_(tensor)
        self.version = update.version

    def generate(self, input_ids, attention_mask=None, *, guidance: Any = None, **gen_kwargs) -> Samples:
        import torch

        assert guidance is None, "HFCopyGenerator: no Q-guided decoding"
        assert not self.closed, "HFCopyGenerator: closed"
        self.calls += 1
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        gen_kwargs.setdefault("pad_token_id", self.tokenizer.pad_token_id)
        with torch.no_grad():
            out = self.model.generate(input_ids=input_ids, attention_mask=attention_mask, output_logits=True,
                                      return_dict_in_generate=True, **gen_kwargs)
        new = out.sequences[:, input_ids.shape[1]:]
        logprobs = torch.stack(out.logits, dim=1).float().log_softmax(-1).gather(2, new[..., None])[..., 0]  # (B, N)
        return Samples(out.sequences, logprobs * real_response_mask(new, gen_kwargs.get("eos_token_id")), self.version)

    def release(self) -> None:
        pass

    def reclaim(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class SkippedSync:
    """``generator`` with the weights of one update withheld (its version still recorded):
    the stale sync a generator check must catch."""

    def __init__(self, generator: Any, skip_version: int):
        self.generator, self.skip_version = generator, skip_version

    def update_weights(self, update: WeightUpdate) -> None:
        if update.version == self.skip_version and not update.full:
            update = WeightUpdate(version=update.version, weights=lambda: iter(()))
        self.generator.update_weights(update)

    def __getattr__(self, name: str):
        return getattr(self.generator, name)


class RecordingGenerator:
    """The engine's own generator, recording every update it is offered: pulls
    ``WeightUpdate.weights()`` (on every rank: it may gather shards) and keeps a copy of each
    tensor, so a test can compare what a generator with its own weights would have received
    with the model's. ``updates``: ``(version, full, {name: tensor})`` in order. Use it as
    ``train.generator: rlkit_core.testing.generator:RecordingGenerator``."""

    def __init__(self, engine: Any):
        default = getattr(engine, "default_generator", None)
        from rlkit_core.generator import EngineSampler

        self.generator = default() if default is not None else EngineSampler(engine)
        self.updates: list[tuple[int, bool, dict[str, Any]]] = []

    def update_weights(self, update: WeightUpdate) -> None:
        copies = {name: tensor.detach().to("cpu", copy=True) for name, tensor in update.weights()}
        self.updates.append((update.version, update.full, copies))
        self.generator.update_weights(update)

    def generate(self, input_ids, attention_mask=None, *, guidance: Any = None, **gen_kwargs) -> Samples:
        return self.generator.generate(input_ids, attention_mask, guidance=guidance, **gen_kwargs)

    def release(self) -> None:
        self.generator.release()

    def reclaim(self) -> None:
        self.generator.reclaim()

    def close(self) -> None:
        self.generator.close()
