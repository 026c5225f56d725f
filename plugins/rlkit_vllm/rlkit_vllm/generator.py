"""The vLLM generator (``train.generator: vllm``): a vLLM engine in the trainer's process with
its own copy of the weights, kept in sync with the training engine (rlkit_core/generator.py).

* Start: the engine's HF export is written to a folder and vLLM loads it (same dtype as the
  export unless ``dtype`` says otherwise), token ids in and out (no tokenizer in vLLM).
* ``generate``: HF ``generate``'s keyword arguments mapped onto ``SamplingParams``; each row's
  seed drawn from torch's generator, so a seeded run samples the same rollouts again. Log-probs
  are vLLM's ``raw_logprobs`` (log softmax of the unprocessed logits) of the sampled token.
* ``update_weights``: the tensors offered (HF names) go through the model's own
  ``load_weights`` inside vLLM's layerwise reload, which re-runs each layer's post-load
  processing (on CPU the linear weights are repacked at load: a plain ``load_weights`` into a
  running engine leaves the kernels on the old weights; a tied LM head is packed again from
  the embedding it shares), then the prefix cache is dropped (its KV came from the old weights).
* ``release``/``reclaim``: vLLM's sleep mode (level 1: weights to host memory, KV cache freed)
  where the platform has it (``sleep=True`` on a GPU); vLLM's CPU backend has none, so there
  they do nothing (``release_note`` says why).
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path
from typing import Any

import torch

from rlkit_core.errors import RlkitError
from rlkit_core.generator import Samples, WeightUpdate, real_response_mask

from rlkit_vllm.checks import in_process_environment, require_vllm

# HF generate's settings that change nothing in how vLLM samples here
IGNORED = {"pad_token_id", "use_cache", "synced_gpus", "output_scores", "return_dict_in_generate", "bos_token_id"}
SAMPLING = {"max_new_tokens", "min_new_tokens", "do_sample", "temperature", "top_k", "top_p", "eos_token_id",
            "repetition_penalty"}


class Quiet(logging.Filter):
    """Drops vLLM's warnings about what this generator does on purpose: a sync that sends only
    the trainable weights (vLLM warns about every frozen layer it did not receive), and no
    tokenizer inside vLLM (its chat-template warm-up fails, with a traceback, at every start)."""

    EXPECTED = ("Failed to load weights", "were not loaded from checkpoint", "Chat template warmup failed")

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(text in message for text in self.EXPECTED)


MAX_MODEL_LEN = 2048  # prompt + response tokens; rollouts are short (generator_kwargs.max_model_len for more)
QUIETED = ("vllm.model_executor.model_loader.reload.layerwise", "vllm.model_executor.model_loader.reload.inplace",
           "vllm.renderers.base")


def sampling_params(gen_kwargs: dict[str, Any], seed: int):
    """``SamplingParams`` for one row from HF ``generate``'s keyword arguments."""
    from vllm import SamplingParams

    unknown = sorted(set(gen_kwargs) - SAMPLING - IGNORED)
    if unknown:
        raise RlkitError(f"train.generator: vllm does not take the generation setting(s) {', '.join(unknown)}; "
                         f"remove them from method.gen_kwargs or use train.generator: null")
    if "max_new_tokens" not in gen_kwargs:
        raise RlkitError("train.generator: vllm needs method.gen_kwargs.max_new_tokens")
    eos = gen_kwargs.get("eos_token_id")
    eos = [] if eos is None else [int(e) for e in torch.as_tensor(eos).reshape(-1).tolist()]
    greedy = not gen_kwargs.get("do_sample", False)
    top_k = gen_kwargs.get("top_k")
    return SamplingParams(
        n=1,
        max_tokens=int(gen_kwargs["max_new_tokens"]),
        min_tokens=int(gen_kwargs.get("min_new_tokens") or 0),
        temperature=0.0 if greedy else float(gen_kwargs.get("temperature", 1.0)),
        top_k=-1 if greedy or not top_k else int(top_k),  # HF: 0 or None = off
        top_p=1.0 if greedy else float(gen_kwargs.get("top_p", 1.0)),
        repetition_penalty=float(gen_kwargs.get("repetition_penalty", 1.0)),
        # exactly HF's stop set: the ids given, not the model's own EOS
        ignore_eos=True, stop_token_ids=eos,
        logprobs=0,  # the sampled token's only
        seed=seed, detokenize=False, skip_special_tokens=False,
    )


def repack_kept_weights(model) -> None:
    """On CPU vLLM packs each linear's weight for its GEMM kernel at load. A layer that keeps
    its weight (the embedding method's: the LM head tied to the input embedding) but loads
    nothing in a reload (its tensor is written through the embedding) keeps the old packed
    copy: pack those again from the weight they share."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    for module in model.modules():
        weight = getattr(module, "weight", None)
        method = getattr(module, "quant_method", None)
        if hasattr(module, "cpu_linear") and method is not None and weight is not None and weight.numel() > 0:
            method.process_weights_after_loading(module)


class VLLMGenerator:
    """``rlkit_core.generator.Generator`` on a vLLM engine in this process.

    ``dtype``: vLLM's (default: the export's). ``kv_cache_mb``: KV cache memory (on CPU it is
    taken from host memory; the default is small, enough for rollouts of short prompts).
    ``sleep``: release/reclaim through vLLM's sleep mode (GPU only). ``folder``: where the
    export goes (default a temporary folder). Other keyword arguments go to ``vllm.LLM``."""

    def __init__(self, engine: Any, *, dtype: str | None = None, kv_cache_mb: int = 256, sleep: bool = False,
                 folder: str | Path | None = None, **llm_kwargs):
        in_process_environment()
        require_vllm()
        from vllm import LLM

        folder = Path(folder or tempfile.mkdtemp(prefix="rlkit-vllm-"))
        engine.export(folder)
        config = json.loads((folder / "config.json").read_text())
        dtype = dtype or config.get("dtype") or config.get("torch_dtype") or "float32"
        positions = config.get("max_position_embeddings") or config.get("n_positions")
        if positions:  # vLLM refuses a KV cache that cannot hold one sequence of max_model_len
            llm_kwargs.setdefault("max_model_len", min(int(positions), MAX_MODEL_LEN))
        self.sleep_mode = bool(sleep)
        if self.sleep_mode and not torch.cuda.is_available():
            raise RlkitError("train.generator_kwargs.sleep: vLLM's sleep mode needs a GPU; remove it on CPU")
        for logger in map(logging.getLogger, QUIETED):
            if not any(isinstance(f, Quiet) for f in logger.filters):
                logger.addFilter(Quiet())
        set_num_threads = torch.set_num_threads  # vLLM's CPU worker disables it for the whole process
        try:
            self.llm = LLM(model=str(folder), skip_tokenizer_init=True, dtype=dtype, enforce_eager=True,
                           logprobs_mode="raw_logprobs", kv_cache_memory_bytes=int(kv_cache_mb) << 20,
                           enable_sleep_mode=self.sleep_mode, **llm_kwargs)
        finally:
            torch.set_num_threads = set_num_threads
        self.tokenizer = engine.tokenizer
        self.version, self.calls, self.released, self.closed = 0, 0, False, False
        self.broken: str | None = None
        self.release_note = None if self.sleep_mode else "vLLM's CPU backend has no sleep mode (or sleep=False)"

    # sampling -------------------------------------------------------------------------------

    def generate(self, input_ids, attention_mask=None, *, guidance: Any = None, **gen_kwargs) -> Samples:
        self._open()
        if guidance is not None:
            raise RlkitError("train.generator: vllm has no Q-guided decoding (ILQL's heads); use train.generator: null")
        self.reclaim()
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        pad = gen_kwargs.get("pad_token_id", self.tokenizer.pad_token_id)
        pad = 0 if pad is None else int(pad)
        B, Q = input_ids.shape
        rows_in = zip(input_ids.cpu(), attention_mask.cpu())
        prompts = [{"prompt_token_ids": row[mask.bool()].tolist()} for row, mask in rows_in]  # left padding off
        seeds = torch.randint(0, 2**31 - 1, (B,)).tolist()  # torch's generator: seeded runs repeat
        params = [sampling_params(gen_kwargs, seed) for seed in seeds]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        self.calls += 1
        rows = [list(out.outputs[0].token_ids) for out in outputs]
        N = max((len(r) for r in rows), default=0)
        new = torch.full((B, N), pad, dtype=input_ids.dtype)
        logprobs = torch.zeros((B, N), dtype=torch.float32)
        for b, (row, out) in enumerate(zip(rows, outputs)):
            new[b, :len(row)] = torch.tensor(row, dtype=input_ids.dtype)
            steps = out.outputs[0].logprobs or []
            logprobs[b, :len(steps)] = torch.tensor([step[token].logprob for step, token in zip(steps, row)])
        logprobs = logprobs * real_response_mask(new, gen_kwargs.get("eos_token_id"))
        return Samples(torch.cat([input_ids.cpu(), new], dim=1), logprobs, self.version)

    # weights --------------------------------------------------------------------------------

    def update_weights(self, update: WeightUpdate) -> None:
        self._open()
        self.reclaim()
        weights = ((name, tensor.detach().to("cpu", copy=True)) for name, tensor in update.weights())

        def reload(worker, weights=weights):
            worker.reload_weights(weights_iterator=weights, is_checkpoint_format=True)
            repack_kept_weights(worker.model_runner.get_model())

        try:
            self.llm.collective_rpc(reload)
        except Exception as exc:
            # a reload stopped half-way leaves layers unloaded: nothing may sample from them
            self.broken = (f"train.generator: vllm failed to load the weights of step {update.version} "
                           f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")
            raise RlkitError(self.broken) from exc
        self.llm.reset_prefix_cache()  # its KV came from the old weights
        self.version = update.version

    # memory ---------------------------------------------------------------------------------

    def release(self) -> None:
        if self.sleep_mode and not self.released and not self.closed:
            self.llm.sleep(level=1)
            self.released = True

    def reclaim(self) -> None:
        if self.released:
            self.llm.wake_up()
            self.released = False

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        engine_core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if engine_core is not None and hasattr(engine_core, "shutdown"):
            engine_core.shutdown()
        del self.llm

    def _open(self) -> None:
        if self.closed:
            raise RlkitError("train.generator: vllm was closed; make a new generator")
        if self.broken:
            raise RlkitError(f"{self.broken}; its weights are unusable: resume the run from its last checkpoint")
