"""The vLLM generator (``train.generator: vllm``): a vLLM engine with its own copy of the weights,
kept in sync with the training engine (rlkit_core/generator.py), in one of two placements
(``train.generator_kwargs.placement``):

* ``in_process`` (the default): vLLM in the trainer's process (:class:`VLLMGenerator`); on a
  GPU it sleeps while the engine trains (``sleep: true``), so one GPU holds both.
* ``process``: vLLM in a child process the trainer talks to (:mod:`rlkit_vllm.process`),
  optionally under another interpreter (``python: /path/to/venv/bin/python``) for a trainer
  whose pins conflict with vLLM's (the NeMo venv), or to sample on other devices.

How vLLM is driven (start, sampling, in-place reload, sleep) is :mod:`rlkit_vllm.sampler`;
this module maps rlkit's tensors onto it: left padding off the prompts, one seed per row from
torch's generator (a seeded run samples the same rollouts again), the new tokens padded after
EOS and their log-probs 0 there.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch

from rlkit_core.errors import ConfigError, RlkitError
from rlkit_core.generator import Samples, WeightUpdate, real_response_mask

PLACEMENTS = ("in_process", "process")


def vllm_generator(engine: Any, *, placement: str = "in_process", **kwargs):
    """The factory ``train.generator: vllm`` names: ``placement`` picks the class."""
    if placement == "in_process":
        return VLLMGenerator(engine, **kwargs)
    if placement == "process":
        from rlkit_vllm.process import ProcessGenerator

        return ProcessGenerator(engine, **kwargs)
    raise ConfigError(f"train.generator_kwargs.placement: {placement!r} is not one of {', '.join(PLACEMENTS)}")


def plain_gen_kwargs(gen_kwargs: dict[str, Any]) -> dict[str, Any]:
    """HF ``generate``'s keyword arguments as plain values (an EOS tensor as a list of ints),
    checked against what vLLM's sampling takes."""
    from rlkit_vllm.sampler import check_gen_kwargs

    check_gen_kwargs(gen_kwargs)
    out = dict(gen_kwargs)
    if out.get("eos_token_id") is not None:
        out["eos_token_id"] = [int(e) for e in torch.as_tensor(out["eos_token_id"]).reshape(-1).tolist()]
    return out


def prompt_rows(input_ids, attention_mask) -> list[list[int]]:
    """Left-padded prompts (B, Q) as lists of their real tokens."""
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    return [row[mask.bool()].tolist() for row, mask in zip(input_ids.cpu(), attention_mask.cpu())]


def row_seeds(rows: int) -> list[int]:
    return torch.randint(0, 2**31 - 1, (rows,)).tolist()  # torch's generator: seeded runs repeat


def to_samples(input_ids, rows: list[list[int]], logprobs: list[list[float]], gen_kwargs: dict[str, Any], pad,
               version: int) -> Samples:
    """The prompts then each row's new tokens, ``pad`` after a row's end; the log-probs 0 there."""
    pad = 0 if pad is None else int(pad)
    B = input_ids.shape[0]
    N = max((len(r) for r in rows), default=0)
    new = torch.full((B, N), pad, dtype=input_ids.dtype)
    lp = torch.zeros((B, N), dtype=torch.float32)
    for b, (row, row_lp) in enumerate(zip(rows, logprobs)):
        new[b, :len(row)] = torch.tensor(row, dtype=input_ids.dtype)
        lp[b, :len(row_lp)] = torch.tensor(row_lp, dtype=torch.float32)
    lp = lp * real_response_mask(new, gen_kwargs.get("eos_token_id"))
    return Samples(torch.cat([input_ids.cpu(), new], dim=1), lp, version)


def one_line(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if not isinstance(exc, RlkitError) else text


class VLLMGenerator:
    """``rlkit_core.generator.Generator`` on a vLLM engine in this process.

    ``dtype``: vLLM's (default: the export's). ``kv_cache_mb``: KV cache memory (on CPU it is
    taken from host memory; the default is small, enough for rollouts of short prompts).
    ``sleep``: release/reclaim through vLLM's sleep mode (GPU only). ``folder``: where the
    export goes (default a temporary folder). Other keyword arguments go to ``vllm.LLM``."""

    def __init__(self, engine: Any, *, dtype: str | None = None, kv_cache_mb: int = 256, sleep: bool = False,
                 folder: str | Path | None = None, **llm_kwargs):
        from rlkit_vllm.checks import in_process_environment, require_vllm
        from rlkit_vllm.sampler import VLLMSampler

        in_process_environment()
        require_vllm()  # before the export: a missing vLLM costs no time
        folder = Path(folder or tempfile.mkdtemp(prefix="rlkit-vllm-"))
        engine.export(folder)
        self.sampler = VLLMSampler(folder, dtype=dtype, kv_cache_mb=kv_cache_mb, sleep=sleep, **llm_kwargs)
        self.tokenizer = engine.tokenizer
        self.version, self.calls, self.closed = 0, 0, False
        self.broken: str | None = None
        self.release_note = None if sleep else "vLLM's CPU backend has no sleep mode (or sleep=False)"

    @property
    def released(self) -> bool:
        return self.sampler.asleep

    def generate(self, input_ids, attention_mask=None, *, guidance: Any = None, **gen_kwargs) -> Samples:
        self._open()
        if guidance is not None:
            raise RlkitError("train.generator: vllm has no Q-guided decoding (ILQL's heads); use train.generator: null")
        gen_kwargs = plain_gen_kwargs(gen_kwargs)
        rows, logprobs = self.sampler.generate(prompt_rows(input_ids, attention_mask), row_seeds(input_ids.shape[0]),
                                               gen_kwargs)
        self.calls += 1
        pad = gen_kwargs.get("pad_token_id", self.tokenizer.pad_token_id)
        return to_samples(input_ids, rows, logprobs, gen_kwargs, pad, self.version)

    def update_weights(self, update: WeightUpdate) -> None:
        self._open()
        weights = ((name, tensor.detach().to("cpu", copy=True)) for name, tensor in update.weights())
        try:
            self.sampler.load(weights)
        except Exception as exc:
            # a reload stopped half-way leaves layers unloaded: nothing may sample from them
            self.broken = f"train.generator: vllm failed to load the weights of step {update.version} ({one_line(exc)})"
            raise RlkitError(self.broken) from exc
        self.version = update.version

    def release(self) -> None:
        if not self.closed:
            self.sampler.sleep()

    def reclaim(self) -> None:
        if not self.closed:
            self.sampler.wake()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.sampler.close()

    def _open(self) -> None:
        if self.closed:
            raise RlkitError("train.generator: vllm was closed; make a new generator")
        if self.broken:
            raise RlkitError(f"{self.broken}; its weights are unusable: resume the run from its last checkpoint")
