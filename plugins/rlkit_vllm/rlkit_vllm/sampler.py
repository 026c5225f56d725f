"""A vLLM engine holding a copy of the policy: what both placements of the vLLM generator drive
(:mod:`rlkit_vllm.generator` in the trainer's process, :mod:`rlkit_vllm.server` in a process of
its own). Token ids in, token ids and raw log-probs out, as plain lists: no rlkit types, so the
same code runs under another interpreter.

* Start: vLLM loads the engine's HF export from a folder, no tokenizer inside vLLM; the
  export's head files (PPO's ``value_head.safetensors``, NeMo's ``rlkit_heads.safetensors``)
  are left out of what vLLM sees, since it loads every ``*.safetensors`` file it finds.
* ``generate``: HF ``generate``'s keyword arguments mapped onto ``SamplingParams``, one seed per
  row (drawn by the trainer, so a seeded run samples the same rollouts again); the log-probs are
  vLLM's ``raw_logprobs`` (log softmax of the unprocessed logits) of each sampled token.
* ``load``: the tensors offered (HF names) go through the model's own ``load_weights`` inside
  vLLM's layerwise reload, which re-runs each layer's post-load processing (on CPU the linear
  weights are repacked at load: a plain ``load_weights`` into a running engine leaves the
  kernels on the old weights; a tied LM head is packed again from the embedding it shares),
  then the prefix cache is dropped (its KV came from the old weights).
* ``sleep``/``wake``: vLLM's sleep mode (level 1: weights to host memory, KV cache freed), GPU only.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any, Iterable

from rlkit_core.errors import RlkitError

from rlkit_vllm.checks import in_process_environment, require_vllm

# HF generate's settings that change nothing in how vLLM samples here
IGNORED = {"pad_token_id", "use_cache", "synced_gpus", "output_scores", "return_dict_in_generate", "bos_token_id"}
SAMPLING = {"max_new_tokens", "min_new_tokens", "do_sample", "temperature", "top_k", "top_p", "eos_token_id",
            "repetition_penalty"}
MAX_MODEL_LEN = 2048  # prompt + response tokens; rollouts are short (generator_kwargs.max_model_len for more)
QUIETED = ("vllm.model_executor.model_loader.reload.layerwise", "vllm.model_executor.model_loader.reload.inplace",
           "vllm.renderers.base")


# the language model's own weight files, as transformers names them (one file, or shards and an index)
MODEL_WEIGHTS = re.compile(r"model(-\d+-of-\d+)?\.safetensors(\.index\.json)?")


def language_model_folder(folder: Path) -> Path:
    """``folder``, or where its head files are not: a ``lm_only`` folder beside the export's files
    that links to all of them but the extra ``*.safetensors`` (vLLM would try to load a value
    head into the language model and stop: "no module or parameter named 'v_head'")."""
    extra = [f for f in folder.glob("*.safetensors") if not MODEL_WEIGHTS.fullmatch(f.name)]
    if not extra:
        return folder
    view = folder / "lm_only"
    view.mkdir(exist_ok=True)
    for link in view.iterdir():  # a folder exported before: its links may be stale
        link.unlink()
    for file in folder.iterdir():
        if file.is_file() and file not in extra:
            (view / file.name).symlink_to(file.resolve())
    return view


class Quiet(logging.Filter):
    """Drops vLLM's warnings about what this generator does on purpose: a sync that sends only
    the trainable weights (vLLM warns about every frozen layer it did not receive), and no
    tokenizer inside vLLM (its chat-template warm-up fails, with a traceback, at every start)."""

    EXPECTED = ("Failed to load weights", "were not loaded from checkpoint", "Chat template warmup failed")

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(text in message for text in self.EXPECTED)


def check_gen_kwargs(gen_kwargs: dict[str, Any]) -> None:
    """One line for a setting vLLM's sampling here cannot honour (checked where the run is)."""
    unknown = sorted(set(gen_kwargs) - SAMPLING - IGNORED)
    if unknown:
        raise RlkitError(f"train.generator: vllm does not take the generation setting(s) {', '.join(unknown)}; "
                         f"remove them from method.gen_kwargs or use train.generator: null")
    if "max_new_tokens" not in gen_kwargs:
        raise RlkitError("train.generator: vllm needs method.gen_kwargs.max_new_tokens")


def sampling_params(gen_kwargs: dict[str, Any], seed: int):
    """``SamplingParams`` for one row from HF ``generate``'s keyword arguments (plain values:
    ``eos_token_id`` an int, a list of ints or None)."""
    from vllm import SamplingParams

    check_gen_kwargs(gen_kwargs)
    eos = gen_kwargs.get("eos_token_id")
    eos = [] if eos is None else [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])]
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


class VLLMSampler:
    """A vLLM engine started from an HF model folder. ``dtype``: vLLM's (default: the folder's).
    ``kv_cache_mb``: KV cache memory (on CPU taken from host memory). ``sleep``: vLLM's sleep
    mode (GPU only). Other keyword arguments go to ``vllm.LLM``."""

    def __init__(self, folder: str | Path, *, dtype: str | None = None, kv_cache_mb: int = 256, sleep: bool = False,
                 **llm_kwargs):
        in_process_environment()
        require_vllm()
        import torch
        from vllm import LLM

        folder = language_model_folder(Path(folder))
        config = json.loads((folder / "config.json").read_text())
        dtype = dtype or config.get("dtype") or config.get("torch_dtype") or "float32"
        positions = config.get("max_position_embeddings") or config.get("n_positions")
        if positions:  # vLLM refuses a KV cache that cannot hold one sequence of max_model_len
            llm_kwargs.setdefault("max_model_len", min(int(positions), MAX_MODEL_LEN))
        # eager by default: vLLM's torch.compile warm-up costs minutes on CPU at every start;
        # generator_kwargs {enforce_eager: false} turns it on
        llm_kwargs.setdefault("enforce_eager", True)
        if sleep and not torch.cuda.is_available():
            raise RlkitError("train.generator_kwargs.sleep: vLLM's sleep mode needs a GPU; remove it on CPU")
        for logger in map(logging.getLogger, QUIETED):
            if not any(isinstance(f, Quiet) for f in logger.filters):
                logger.addFilter(Quiet())
        set_num_threads = torch.set_num_threads  # vLLM's CPU worker disables it for the whole process
        try:
            self.llm = LLM(model=str(folder), skip_tokenizer_init=True, dtype=dtype,
                           logprobs_mode="raw_logprobs", kv_cache_memory_bytes=int(kv_cache_mb) << 20,
                           enable_sleep_mode=bool(sleep), **llm_kwargs)
        finally:
            torch.set_num_threads = set_num_threads
        self.sleep_mode, self.asleep = bool(sleep), False

    def generate(self, prompts: list[list[int]], seeds: list[int], gen_kwargs: dict[str, Any]):
        """Each prompt's new tokens and the raw log-probs of each (lists of lists)."""
        self.wake()
        params = [sampling_params(gen_kwargs, seed) for seed in seeds]
        outputs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        rows = [list(out.outputs[0].token_ids) for out in outputs]
        logprobs = [[step[token].logprob for step, token in zip(out.outputs[0].logprobs or [], row)]
                    for row, out in zip(rows, outputs)]
        return rows, logprobs

    def load(self, weights: Iterable[tuple[str, Any]]) -> None:
        """Replace the weights offered (HF names, CPU tensors) in the running engine."""
        self.wake()

        def reload(worker, weights=weights):
            worker.reload_weights(weights_iterator=iter(weights), is_checkpoint_format=True)
            repack_kept_weights(worker.model_runner.get_model())

        self.llm.collective_rpc(reload)
        self.llm.reset_prefix_cache()  # its KV came from the old weights

    def sleep(self) -> None:
        if self.sleep_mode and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def wake(self) -> None:
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False

    def close(self) -> None:
        engine_core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if engine_core is not None and hasattr(engine_core, "shutdown"):
            engine_core.shutdown()
        del self.llm
