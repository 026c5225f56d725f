"""``MegatronEngine``: what every NeMo trainer runs on — the parallel state, a Megatron GPT
with the method's heads (converted from an HF model or built from the Megatron YAML), wrapped
in megatron-core's DDP, its optimizer, one optimisation step through Megatron's schedule,
sampling, and full-weight export.

The Lightning pieces (``megatron_trainer``) come from the same Megatron YAML; the loops here
drive megatron-core directly (what NeMo's MegatronStrategy wraps), so that PPO can
interleave generation and optimisation as trlX's NeMo PPO did, and a GPU needs only the
megatron-core wheel.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Optional, Sequence

import torch
import torch.distributed as dist

from rlkit_core.errors import ConfigError

from rlkit_nemo.lightning import require_megatron
from rlkit_nemo.megatron_config import translate
from rlkit_nemo.parallel import check_parallel_sizes


def init_distributed() -> None:
    """torch.distributed from torchrun's environment (a world of one without it)."""
    if dist.is_initialized():
        return
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend, rank=int(os.environ.get("RANK", 0)), world_size=int(os.environ.get("WORLD_SIZE", 1)))
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))


def load_hf_source(pretrained: Any):
    """An HF causal LM from a folder/hub id, a model, or a config (random weights)."""
    from transformers import AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

    if isinstance(pretrained, PreTrainedModel):
        return pretrained
    if isinstance(pretrained, PretrainedConfig):
        return AutoModelForCausalLM.from_config(pretrained)
    return AutoModelForCausalLM.from_pretrained(pretrained)


def model_source(model: dict, pretrained: Any, vocab_size: Optional[int]):
    """(model config, vocabulary size, full Megatron state dict or None, HF config or None).
    With an HF model the architecture is the HF model's, converted; the parallel sizes, dtype
    and recompute settings stay the Megatron YAML's."""
    from rlkit_nemo.convert import hf_to_megatron, megatron_model_config

    model = dict(model)
    if pretrained is None:
        return model, vocab_size, None, None
    hf = load_hf_source(pretrained)
    keep = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "sequence_parallel", "params_dtype",
            "activations_checkpoint_granularity", "activations_checkpoint_method", "activations_checkpoint_num_layers")
    model = {**megatron_model_config(hf.config), **{k: model[k] for k in keep if k in model}}
    return model, hf.config.vocab_size, hf_to_megatron(hf.state_dict(), hf.config), hf.config


class MegatronEngine:
    def __init__(self, megatron_cfg: Any, *, make_heads: Optional[Callable] = None, pretrained_model: Any = None,
                 vocab_size: Optional[int] = None, seed: int = 1000, what: str = "the NeMo trainers"):
        require_megatron(what)
        from megatron.core import parallel_state as ps
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
        from megatron.core.distributed.finalize_model_grads import finalize_model_grads
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
        from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

        from rlkit_nemo.models.build import build_gpt
        from rlkit_nemo.models.sharding import load_full_state_dict

        self.cpu = not torch.cuda.is_available()
        self.spec = spec = translate(megatron_cfg, cpu=self.cpu)
        init_distributed()
        model_cfg, vocab_size, self.full_hf, self.hf_config = model_source(spec["model"], pretrained_model, vocab_size)
        tp, pp = model_cfg.get("tensor_model_parallel_size", 1), model_cfg.get("pipeline_model_parallel_size", 1)
        check_parallel_sizes(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, world_size=dist.get_world_size(),
                             num_attention_heads=model_cfg["num_attention_heads"], num_layers=model_cfg["num_layers"],
                             where="megatron_cfg.model")
        if vocab_size is None or vocab_size % tp:
            raise ConfigError(f"megatron_cfg.model: vocabulary size {vocab_size} must be divisible by tensor_model_parallel_size={tp}")
        if ps.model_parallel_is_initialized() and (
            ps.get_tensor_model_parallel_world_size(), ps.get_pipeline_model_parallel_world_size()) != (tp, pp):
            ps.destroy_model_parallel()  # a previous trainer in this process used other sizes
        if not ps.model_parallel_is_initialized():
            ps.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp)
        torch.manual_seed(seed)
        model_parallel_cuda_manual_seed(seed)
        self.model_cfg, self.vocab_size = model_cfg, vocab_size

        self.module = build_gpt(model_cfg, vocab_size, make_heads=make_heads, cpu=self.cpu)
        if self.full_hf is not None:
            load_full_state_dict(self.module, self.full_hf, keep=("heads.",))  # heads start fresh
        if not self.cpu:
            self.module.cuda()
        config = self.module.config
        self.model = DistributedDataParallel(
            config=config, module=self.module,
            ddp_config=DistributedDataParallelConfig(
                grad_reduce_in_fp32=True, overlap_grad_reduce=False,
                use_distributed_optimizer=spec["optimizer"]["use_distributed_optimizer"],
            ),
        )
        config.finalize_model_grads_func = finalize_model_grads
        opt = dict(spec["optimizer"], params_dtype=getattr(torch, spec["optimizer"]["params_dtype"]))
        self.optimizer = get_megatron_optimizer(OptimizerConfig(**opt), [self.model])
        self.ps = ps

    # --- parallel layout --------------------------------------------------------------------

    @property
    def is_last_stage(self) -> bool:
        return self.ps.is_pipeline_last_stage()

    @property
    def dp_rank(self) -> int:
        return self.ps.get_data_parallel_rank()

    @property
    def dp_world(self) -> int:
        return self.ps.get_data_parallel_world_size()

    def batch_sizes(self) -> tuple[int, int]:
        """(micro batch, microbatches per step on this data-parallel rank) of the YAML."""
        data = self.spec["data"]
        return data["micro_batch_size"], data["global_batch_size"] // (data["micro_batch_size"] * self.dp_world)

    # --- optimisation -----------------------------------------------------------------------

    def step(self, microbatches: Sequence[Any], inputs: Callable, loss: Callable) -> dict[str, float]:
        """Forward, backward (gradients averaged over data-parallel ranks) and one optimizer
        step; returns the mean stats over microbatches, the same on every rank."""
        from rlkit_nemo.schedule import forward_backward

        self.model.train()
        self.model.zero_grad_buffer()
        self.optimizer.zero_grad()
        stats = forward_backward(self.model, microbatches, inputs, loss)
        _, grad_norm, _ = self.optimizer.step()
        out = self.broadcast_stats(stats)
        if grad_norm is not None:
            out["grad_norm"] = float(grad_norm)
        return out

    def broadcast_stats(self, stats: list[dict]) -> dict[str, float]:
        """Mean of the last stage's microbatch stats, averaged over data-parallel ranks and
        sent to every pipeline stage."""
        mean = {}
        if stats:
            mean = {k: sum(float(s[k]) for s in stats) / len(stats) for k in stats[0]}
        box = [mean]
        if self.ps.get_pipeline_model_parallel_world_size() > 1:
            last = self.ps.get_pipeline_model_parallel_last_rank()
            dist.broadcast_object_list(box, src=last, group=self.ps.get_pipeline_model_parallel_group())
        mean = box[0]
        if self.dp_world > 1 and mean:
            keys = sorted(mean)
            t = torch.tensor([mean[k] for k in keys], dtype=torch.float64)
            dist.all_reduce(t, group=self.ps.get_data_parallel_group())
            mean = dict(zip(keys, (t / self.dp_world).tolist()))
        return mean

    # --- forward passes outside the schedule (single stage) ----------------------------------

    def require_single_stage(self, what: str) -> None:
        if self.ps.get_pipeline_model_parallel_world_size() > 1:
            raise ConfigError(
                f"megatron_cfg.model.pipeline_model_parallel_size: {what} runs with PP=1 only for now; "
                f"use tensor parallelism (tensor_model_parallel_size) for this trainer"
            )

    @torch.no_grad()
    def forward(self, module, input_ids, attention_mask, position_ids, head_kwargs=None):
        """Logits (B, T, V / tp) and the heads' outputs of a whole (PP=1) model."""
        from rlkit_nemo.models.gpt import causal_padding_mask

        device = self.device
        return module(input_ids.to(device), position_ids.to(device), causal_padding_mask(attention_mask.to(device)),
                      head_kwargs=head_kwargs)

    @property
    def device(self):
        return torch.device("cpu") if self.cpu else torch.device("cuda", torch.cuda.current_device())

    @torch.no_grad()
    def sample(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *, max_new_tokens: int,
               eos_token_id: Optional[int], pad_token_id: int, temperature: float = 1.0, top_k: int = 0,
               do_sample: bool = True, logits_fn: Optional[Callable] = None) -> torch.Tensor:
        """Autoregressive sampling from left-padded prompts -> (B, N) new tokens, padded after
        EOS. TP rank 0 samples and broadcasts, so every TP rank holds the same tokens.
        ``logits_fn(logits, heads, last_tokens)`` may reshape the full-vocabulary next-token
        logits (ILQL's Q guidance and logit mask)."""
        from megatron.core.tensor_parallel import gather_from_tensor_model_parallel_region

        from rlkit_methods.data.padding import position_ids_from_mask

        self.require_single_stage("generation")
        self.module.eval()
        ids, mask = input_ids.to(self.device), attention_mask.to(self.device)
        B = ids.shape[0]
        done = torch.zeros(B, dtype=torch.bool, device=self.device)
        new = []
        for _ in range(max_new_tokens):
            T = ids.shape[1]
            last = torch.full((B, 1), T - 1, device=self.device)
            head_kwargs = {"states_ixs": last, "actions_ixs": last} if logits_fn is not None else None
            out = self.forward(self.module, ids, mask, position_ids_from_mask(mask), head_kwargs)
            logits, heads = out if isinstance(out, tuple) else (out, None)  # SFT's model has no heads
            logits = gather_from_tensor_model_parallel_region(logits[:, -1:].float())[:, 0]  # (B, V)
            if logits_fn is not None:
                logits = logits_fn(logits, heads, ids[:, -1])
            logits = logits / max(temperature, 1e-6)
            if top_k:
                kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            token = torch.multinomial(logits.softmax(-1), 1)[:, 0] if do_sample else logits.argmax(-1)
            src = self.ps.get_tensor_model_parallel_src_rank()
            dist.broadcast(token, src=src, group=self.ps.get_tensor_model_parallel_group())
            real = ~done  # EOS itself is a real token; what follows it is padding
            token = torch.where(done, torch.full_like(token, pad_token_id), token)
            new.append(token)
            ids, mask = torch.cat([ids, token[:, None]], 1), torch.cat([mask, real.long()[:, None]], 1)
            if eos_token_id is not None:
                done = done | (token == eos_token_id)
            if bool(done.all()):
                break
        self.module.train()
        return torch.stack(new, 1).cpu()

    # --- weights ------------------------------------------------------------------------------

    def full_state_dict(self):
        from rlkit_nemo.models.sharding import full_state_dict

        return full_state_dict(self.module)
