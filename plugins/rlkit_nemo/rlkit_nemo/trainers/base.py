"""What the three NeMo trainers share: trlX's constructor arguments, the tokenizer, the
engine, batching into Megatron microbatches, lifecycle hooks, generation, save/load/export."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Optional

import torch

from rlkit_core.errors import ConfigError

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def load_tokenizer(config):
    """``tokenizer.tokenizer_path`` (``byt5`` builds ByT5's byte tokenizer, no files); a
    tokenizer without a pad token pads with EOS."""
    from transformers import AutoTokenizer, ByT5Tokenizer

    t = config.tokenizer
    path = t.tokenizer_path or config.model.model_path
    tok = ByT5Tokenizer() if path == "byt5" else AutoTokenizer.from_pretrained(path)
    tok.padding_side, tok.truncation_side = t.padding_side, t.truncation_side
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def split_batch(batch: Any, n: int) -> list:
    """A collated batch (dataclass or dict of (B, ...) tensors) -> ``n`` equal microbatches."""
    fields = dataclasses.asdict(batch) if dataclasses.is_dataclass(batch) else dict(batch)
    size = next(v for v in fields.values() if isinstance(v, torch.Tensor)).shape[0] // n
    parts = [
        {k: v[i * size : (i + 1) * size] if isinstance(v, torch.Tensor) else v for k, v in fields.items()}
        for i in range(n)
    ]
    return [dataclasses.replace(batch, **p) for p in parts] if dataclasses.is_dataclass(batch) else parts


class NeMoTrainer:
    """Base of ``NeMoPPOTrainer``, ``NeMoILQLTrainer`` and ``NeMoSFTTrainer``."""

    def __init__(self, config, *, reward_fn=None, metric_fn=None, stop_sequences=None, logit_mask=None,
                 megatron_cfg=None, pretrained_model=None, make_heads=None, **kwargs):
        from rlkit_nemo.lightning import require_megatron

        require_megatron(f"train.trainer: {type(self).__name__}")
        if kwargs:
            raise ConfigError(f"train.trainer_kwargs.{sorted(kwargs)[0]}: unknown argument of {type(self).__name__}; "
                              f"it takes megatron_cfg and pretrained_model")
        if megatron_cfg is None:
            raise ConfigError(f"train.trainer_kwargs.megatron_cfg: missing; {type(self).__name__} needs a Megatron YAML "
                              f"(examples in {CONFIGS})")
        from rlkit_nemo.trainers.engine import MegatronEngine

        self.config, self.reward_fn, self.metric_fn = config, reward_fn, metric_fn
        self.stop_sequences, self.logit_mask = stop_sequences, logit_mask
        self.tokenizer = load_tokenizer(config)
        pretrained = pretrained_model if pretrained_model is not None else config.model.model_path
        self.engine = MegatronEngine(megatron_cfg, make_heads=make_heads, pretrained_model=pretrained,
                                     vocab_size=len(self.tokenizer), seed=config.train.seed, what=f"train.trainer: {type(self).__name__}")
        self.iter_count = 0
        self.history: list[dict] = []
        self.eval_pipeline = None

    # --- trlX's trainer API -------------------------------------------------------------------

    @property
    def is_main_process(self) -> bool:
        return torch.distributed.get_rank() == 0

    def add_eval_pipeline(self, pipeline) -> None:
        self.eval_pipeline = pipeline

    def add_prompt_pipeline(self, pipeline) -> None:
        self.prompt_pipeline = pipeline

    def generate(self, input_ids, attention_mask=None, **kwargs) -> torch.Tensor:
        """Prompts (B, Q) left-padded -> (B, Q + N), as HF's ``generate`` returns."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        gen = {**self.gen_kwargs(), **kwargs}
        new = self.engine.sample(input_ids, attention_mask, **gen, **self.sample_extras())
        return torch.cat([input_ids, new], 1)

    def gen_kwargs(self) -> dict:
        g = dict(getattr(self.config.method, "gen_kwargs", None) or {})
        return dict(max_new_tokens=g.get("max_new_tokens", 20), temperature=g.get("temperature", 1.0),
                    top_k=g.get("top_k", 0) or 0, do_sample=g.get("do_sample", True),
                    eos_token_id=self.tokenizer.eos_token_id, pad_token_id=self.tokenizer.pad_token_id)

    def sample_extras(self) -> dict:
        return {}

    def hook(self, name: str, **kwargs) -> None:
        from rlkit_core.plugins import get_host

        getattr(get_host().hook, name)(trainer=self, is_main_process=self.is_main_process, **kwargs)

    def record(self, stats: dict) -> None:
        """After each optimizer step: log, and evaluate / checkpoint at trlX's intervals."""
        self.history.append({"step": self.iter_count, **stats})
        self.hook("rlkit_step_end", step=self.iter_count, metrics=stats)
        train = self.config.train
        if self.iter_count % train.eval_interval == 0 or self.iter_count == train.total_steps:
            self.evaluate()
        if self.iter_count % train.checkpoint_interval == 0:
            self.save()

    def evaluate(self) -> dict:
        """Generate for the eval prompts (one batch per data-parallel rank) and score them
        with the reward and metric functions; PP=1 only (sampling), skipped otherwise."""
        if self.eval_pipeline is None or self.engine.ps.get_pipeline_model_parallel_world_size() > 1:
            return {}
        pipe, engine = self.eval_pipeline, self.engine
        size = self.config.train.batch_size
        items = [pipe[i] for i in range(engine.dp_rank * size, min(len(pipe), (engine.dp_rank + 1) * size))]
        if not items:
            return {}
        batch = pipe.collate(items)
        new = self.generate(batch["input_ids"], batch["attention_mask"])[:, batch["input_ids"].shape[1]:]
        tok = self.tokenizer
        prompts = tok.batch_decode(batch["input_ids"], skip_special_tokens=True)
        outputs = tok.batch_decode(new, skip_special_tokens=True)
        samples = [p + o for p, o in zip(prompts, outputs)]
        stats: dict = {}
        for name, fn in (("reward", self.reward_fn), ("metric", self.metric_fn)):
            if fn is None:
                continue
            result = fn(samples=samples, prompts=prompts, outputs=outputs, tokenizer=tok)
            values = result if isinstance(result, dict) else {"mean": result}
            for key, xs in values.items():
                stats[f"{name}/{key}"] = float(torch.tensor([float(x) for x in xs]).mean())
        self.history.append({"step": self.iter_count, "eval": True, **stats})
        self.hook("rlkit_evaluation_end", step=self.iter_count, metrics=stats,
                  samples=list(zip(prompts, outputs)))
        return stats

    # --- checkpoints ---------------------------------------------------------------------------

    def _shard_name(self) -> str:
        ps = self.engine.ps
        return f"mp_rank_{ps.get_tensor_model_parallel_rank():02d}_{ps.get_pipeline_model_parallel_rank():03d}.pt"

    def save(self, directory: Optional[str] = None) -> None:
        """This rank's model shard and optimizer state (one writer per TP x PP position)."""
        directory = directory or os.path.join(self.config.train.checkpoint_dir, f"checkpoint_{self.iter_count}")
        os.makedirs(directory, exist_ok=True)
        if self.engine.dp_rank == 0:
            torch.save({"model": self.engine.module.state_dict(), "optimizer": self.engine.optimizer.state_dict(),
                        "iter_count": self.iter_count}, os.path.join(directory, self._shard_name()))
        torch.distributed.barrier()
        self.hook("rlkit_checkpoint_saved", step=self.iter_count, path=directory)

    def load(self, directory: str) -> None:
        path = os.path.join(directory, self._shard_name())
        if not os.path.isfile(path):
            raise ConfigError(f"{path}: no checkpoint shard for this rank; load with the TP/PP sizes it was saved with")
        state = torch.load(path, map_location="cpu", weights_only=False)
        self.engine.module.load_state_dict(state["model"])
        self.engine.optimizer.load_state_dict(state["optimizer"])
        self.iter_count = state["iter_count"]

    def save_pretrained(self, directory: Optional[str] = None) -> None:
        """An HF model folder (when the model came from HF Llama/GPT-2), else the full
        Megatron state dict; written by rank 0 (collective: every rank calls it)."""
        from rlkit_nemo.convert import megatron_to_hf

        directory = directory or os.path.join(self.config.train.checkpoint_dir, "hf_model")
        full = {k: v for k, v in self.engine.full_state_dict().items() if not k.startswith("heads.")}
        if self.is_main_process:
            os.makedirs(directory, exist_ok=True)
            if self.engine.hf_config is not None:
                from transformers import AutoModelForCausalLM

                model = AutoModelForCausalLM.from_config(self.engine.hf_config)
                model.load_state_dict(megatron_to_hf(full, self.engine.hf_config), strict=False)
                model.save_pretrained(directory)
            else:
                torch.save(full, os.path.join(directory, "megatron_full_state_dict.pt"))
            self.tokenizer.save_pretrained(directory)
        torch.distributed.barrier()
