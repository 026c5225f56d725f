"""``AccelerateEngine``: rlkit's engine interface (``rlkit_core.engine``) on HF transformers
and accelerate — DDP, DeepSpeed ZeRO, FSDP, PEFT, seq2seq.

It builds the model a method asks for (:mod:`rlkit_accelerate.build`), runs its forward
kinds (:mod:`rlkit_accelerate.forwards`), samples with whole weights on every rank
(:mod:`rlkit_accelerate.sharding`), steps the optimizer over micro-batches with gradient
accumulation, and saves, loads and exports the weights. It knows nothing of PPO or ILQL.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from accelerate import Accelerator
from accelerate.utils import broadcast_object_list, gather_object, set_seed

from rlkit_core.engine import ModelSpec, QGuidance, check_forward_kind
from rlkit_core.errors import ConfigError, RlkitError
from rlkit_core.process_group import destroy_at_clean_exit
from rlkit_methods.engine_kit import load_tokenizer, real_tokens, split_microbatches, to_cpu, to_device

from rlkit_accelerate import assets
from rlkit_accelerate.build import build_model, is_seq2seq
from rlkit_accelerate.kernels import fuse_activations
from rlkit_accelerate.forwards import ilql_forward, response_forward, tokens_forward
from rlkit_accelerate.models.adapters import save_base_model, virtual_tokens
from rlkit_accelerate.models.blocks import eval_mode
from rlkit_accelerate.models.shared_prompts import generate_sharing_prompts
from rlkit_accelerate.optim import make_optimizer, make_scheduler
from rlkit_accelerate.packing import (
    attention_cost,
    check_packing,
    packed_ilql_forward,
    packed_response_forward,
    packed_tokens_forward,
    packing_lm,
)
from rlkit_accelerate.quiet import deepspeed_on_cpu_quietly, no_padding_warning
from rlkit_accelerate.sharding import (
    configure_deepspeed,
    expose_block_classes,
    full_parameters,
    full_state_dict,
    whole_model_construction,
)

SCHEDULER_FILE = "scheduler.json"


def disable_dropout(model: torch.nn.Module) -> None:
    """Every dropout module off (TRL's ``disable_dropout``), also while training."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0


def set_pad_token(model: torch.nn.Module, tokenizer: Any) -> None:
    """The tokenizer's pad id into the model's config, where an exported sequence classifier
    finds each row's last token (HF refuses batches of several rows without it)."""
    config = getattr(getattr(model, "base_model", model), "config", None)
    if config is not None and getattr(config, "pad_token_id", None) is None:
        config.pad_token_id = tokenizer.pad_token_id


class AccelerateEngine:
    def __init__(self, config, **kwargs):
        if kwargs:
            raise ConfigError(f"train.trainer_kwargs: the accelerate engine does not accept {', '.join(sorted(kwargs))}")
        self.config = config
        deepspeed_on_cpu_quietly()  # before accelerate imports DeepSpeed: no "Setting accelerator to CPU" line
        # accelerate runs several CPU processes (torchrun, gloo) only when told it is on CPU
        multi_cpu = int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available()
        self.accelerator = Accelerator(cpu=multi_cpu)
        if torch.distributed.is_initialized():
            destroy_at_clean_exit()
        # fixed for the run; kept here so the trainer still answers after accelerate's state is reset
        self.is_main_process = self.accelerator.is_main_process
        self.process_index = self.accelerator.process_index
        self.num_processes = self.accelerator.num_processes
        self.device = self.accelerator.device
        self.writes_rank_state = True  # every rank is its own data-parallel index
        set_seed(config.train.seed)  # before the model: a model built from a config is the same everywhere
        self.tokenizer = load_tokenizer(config.tokenizer, assets.resolve, trust_remote_code=config.model.trust_remote_code)
        self.model = self.opt = self.scheduler = None
        self._unwrapped = None  # (wrapper, unwrapped model)
        self.virtual_tokens = 0
        self.packing, self.attention_cost, self.row_attention = False, None, False

    # --- facts -------------------------------------------------------------------------------

    @property
    def is_seq2seq(self) -> bool:
        return is_seq2seq(self.config)

    def batch_sizes(self) -> tuple[int, int]:
        train = self.config.train
        return train.batch_size, train.minibatch_size or train.batch_size

    @property
    def unwrapped_model(self) -> torch.nn.Module:
        # never reach through the DDP wrapper; accelerate's unwrap_model costs ~10 ms a call
        # (package metadata look-ups, a walk over the modules), so it runs once per wrapper
        if self._unwrapped is None or self._unwrapped[0] is not self.model:
            self._unwrapped = (self.model, self.accelerator.unwrap_model(self.model))
        return self._unwrapped[1]

    @property
    def decoder_start_token_id(self) -> int:
        return self.unwrapped_model.layout.decoder_start_token_id

    # --- the model ---------------------------------------------------------------------------

    def build(self, spec: ModelSpec) -> None:
        config = self.config
        self.spec = spec
        with whole_model_construction(self.accelerator):
            model = build_model(config, spec)
        fuse_activations(model)  # gelu_new as one kernel: the same math, ~10% off a small GPT-2's step
        if spec.options.get("disable_dropout"):
            disable_dropout(model)
        if spec.options.get("score_head"):
            set_pad_token(model, self.tokenizer)
        self.virtual_tokens = virtual_tokens(model) if spec.heads == "lm" else 0
        model.to(self.device)
        self.packing = config.train.packing
        if self.packing:
            # row attention (packing.py's rows layout) where the model runs it right
            self.row_attention = check_packing(model, seq2seq=self.is_seq2seq, virtual_tokens=self.virtual_tokens)
            self.attention_cost = attention_cost(model)  # sizes the bins rows are packed into
        self.opt = make_optimizer(config.optimizer.name, config.optimizer.kwargs, model.parameters())
        self.scheduler = make_scheduler(config.scheduler.name, config.scheduler.kwargs, self.opt, config.train.total_steps)
        configure_deepspeed(self.accelerator, *self.batch_sizes(), config.train.max_grad_norm)
        expose_block_classes(model)
        self.model, self.opt = self.accelerator.prepare(model, self.opt)

    @contextmanager
    def evaluating(self):
        """The unwrapped model in eval mode (no dropout, whoever calls and whenever: after
        training the model is left training) with whole weights (ZeRO-3, FSDP), so that
        ranks running different numbers of forward passes need no collectives."""
        model = self.unwrapped_model
        with eval_mode(model), full_parameters(self.model):
            yield model

    @torch.no_grad()
    def generate(self, input_ids, attention_mask=None, *, guidance: QGuidance | None = None, **gen_kwargs) -> torch.Tensor:
        device = self.device
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        with self.evaluating() as model, no_padding_warning(model):  # the mask is given; see quiet.py
            if self.spec.heads == "ilql":  # Q-guided decoding: the model's own loop over its heads
                guidance = guidance or QGuidance()
                if guidance.logit_mask is not None:
                    gen_kwargs.setdefault("logit_mask", guidance.logit_mask)
                gen_kwargs.setdefault("beta", guidance.beta)
                return model.generate(input_ids, attention_mask, **gen_kwargs).cpu()
            out = generate_sharing_prompts(model, input_ids, attention_mask, **gen_kwargs)
        if self.spec.heads == "lm" and self.is_seq2seq:
            # the decoder's output starts with its start token: prompt + new tokens, as for causal LMs
            out = torch.cat([input_ids, out[:, 1:]], dim=1)
        return out.cpu()

    def default_generator(self):
        """This engine's sampler as an ``rlkit_core.generator.Generator`` (shares the weights)."""
        from rlkit_accelerate.generator import AccelerateGenerator

        return AccelerateGenerator(self)

    def named_weights(self, *, trainable_only: bool = False):
        """(HF name, tensor) of the HF model, whole on every rank; see ``WeightUpdate``."""
        from rlkit_accelerate.generator import hf_named_weights

        return hf_named_weights(self, trainable_only=trainable_only)

    def _forward(self, kind: str, model, batch, want: Sequence[str], *, train: bool) -> dict[str, Any]:
        if train and self.packing:  # the rows of a micro-batch packed, padding-free (packing.py)
            with no_padding_warning(self.unwrapped_model):  # no mask by design: the position ids part the rows
                cost = self.attention_cost
                if kind == "response":
                    return packed_response_forward(model, self.unwrapped_model, batch, cost)
                if kind == "tokens":
                    rows_lm = packing_lm(self.unwrapped_model) if self.row_attention else None
                    return packed_tokens_forward(model, batch, cost, rows_lm)
                return packed_ilql_forward(model, batch, cost)
        if kind == "response":
            return response_forward(model, self.unwrapped_model, batch, want, train=train)
        if kind == "tokens":
            return tokens_forward(model, self.unwrapped_model, batch, seq2seq=self.is_seq2seq, virtual_tokens=self.virtual_tokens)
        return ilql_forward(model, batch, seq2seq=self.is_seq2seq)

    @torch.no_grad()
    def forward(self, kind: str, batch: Any, want: Sequence[str] = ()) -> dict[str, Any]:
        check_forward_kind(kind)
        with self.evaluating() as model:  # the unwrapped model runs outside FSDP's root forward
            return to_cpu(self._forward(kind, model, to_device(batch, self.device), want, train=False))

    def step(self, kind: str, items: Sequence[Any], collate: Callable, loss: Callable) -> dict[str, float]:
        """One optimizer step over ``items`` in micro-batches of ``train.minibatch_size`` items
        (or ``train.minibatch_tokens`` real tokens), each weighted by its rows (``Engine.step``);
        the stats averaged over data-parallel ranks."""
        check_forward_kind(kind)
        acc = self.accelerator
        # dropout on while learning (trlX trained in eval mode), in every module: the top's flag
        # says nothing of its submodules (a model from from_pretrained is in eval mode under it)
        self.model.train()
        cpu = time.process_time()  # the whole step's CPU: wall time is noise on a shared machine
        micro = self._microbatches(list(items), collate)
        stats_sum: dict[str, float] = {}
        forward_time = backward_time = 0.0
        for k, mb in enumerate(micro):
            batch = to_device(collate(mb), self.device)
            last = k == len(micro) - 1
            # DeepSpeed steps its engine inside backward whenever gradients sync: only the last
            acc.gradient_state._set_sync_gradients(last)
            with nullcontext() if last else acc.no_sync(self.model):
                start = time.time()
                value, stats = loss(self._forward(kind, self.model, batch, (), train=True), batch)
                forward_time += time.time() - start
                start = time.time()
                acc.backward(value * len(mb) / len(items))
                backward_time += time.time() - start
            for name, v in stats.items():
                stats_sum[name] = stats_sum.get(name, 0.0) + float(v) * len(mb) / len(items)
        if self.num_processes > 1 and stats_sum:  # every rank's stats, as the gradients are
            keys = sorted(stats_sum)
            total = self.all_reduce_sum(torch.tensor([stats_sum[k] for k in keys], dtype=torch.float64))
            stats_sum = dict(zip(keys, (total / self.num_processes).tolist()))
        if self.config.train.max_grad_norm:
            norm = acc.clip_grad_norm_(self.model.parameters(), self.config.train.max_grad_norm)
            if norm is not None:  # DeepSpeed clips inside its step and may not report the norm
                stats_sum["policy/grad_norm"] = float(norm)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.scheduler.step()
        stats_sum["time/forward"] = forward_time
        stats_sum["time/backward"] = backward_time
        stats_sum["cpu/step"] = time.process_time() - cpu
        for group, lr in enumerate(self.scheduler.get_last_lr()):
            stats_sum[f"learning_rate_group_{group}"] = lr
        return stats_sum

    def _microbatches(self, items: list[Any], collate: Callable) -> list[list[Any]]:
        """``train.minibatch_size`` items, or ``train.minibatch_tokens`` real tokens, per
        micro-batch; as many micro-batches on every rank (the most any rank needs), since
        ZeRO-3 and FSDP gather the weights in every forward."""
        budget = self.config.train.minibatch_tokens
        if not budget:
            return split_microbatches(items, self.batch_sizes()[1])
        tokens = [real_tokens(collate([item])) for item in items]
        micro = split_microbatches(items, None, tokens=tokens, minibatch_tokens=budget)
        if self.num_processes > 1:
            count = int(self.accelerator.gather(torch.tensor([len(micro)], device=self.device)).max())
            micro = split_microbatches(items, None, tokens=tokens, minibatch_tokens=budget, count=count)
        return micro

    def sync_target(self, alpha: float) -> None:
        self.unwrapped_model.sync_target_q_heads(alpha)

    # --- collectives ---------------------------------------------------------------------------

    def gather_object(self, obj: Any) -> list[Any]:
        return gather_object([obj]) if self.num_processes > 1 else [obj]

    def broadcast_object(self, obj: Any) -> Any:
        box = [obj]
        if self.num_processes > 1:
            broadcast_object_list(box)
        return box[0]

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.num_processes == 1:
            return tensor.clone()
        return self.accelerator.reduce(tensor.to(self.device), reduction="sum").to(tensor.device)

    def barrier(self) -> None:
        self.accelerator.wait_for_everyone()

    # --- state -----------------------------------------------------------------------------------

    def save_state(self, directory) -> None:
        directory = Path(directory)
        self.accelerator.save_state(str(directory / "accelerate"), safe_serialization=False)
        if self.is_main_process:
            (directory / SCHEDULER_FILE).write_text(json.dumps(self.scheduler.state_dict()))
        self.export(directory / "hf_model", _barrier=False)

    def load_state(self, directory) -> None:
        directory = Path(directory)
        try:
            self.accelerator.load_state(str(directory / "accelerate"))
        except (RuntimeError, ValueError, KeyError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise RlkitError(f"{directory}: the checkpoint does not fit this model ({first[:200]}); "
                             f"resume with the config it was saved with") from None
        saved = json.loads((directory / SCHEDULER_FILE).read_text())
        expected = set(self.scheduler.state_dict())
        if not isinstance(saved, dict) or not expected <= set(saved):  # a mixed or fresh schedule otherwise
            missing = sorted(expected - set(saved)) if isinstance(saved, dict) else ["all"]
            raise RlkitError(f"{directory / SCHEDULER_FILE}: not the state of this run's scheduler "
                             f"({type(self.scheduler).__name__}; missing {', '.join(missing[:4])}); the checkpoint is damaged "
                             f"or from another scheduler: resume from an earlier checkpoint, or with its scheduler settings")
        self.scheduler.load_state_dict(saved)

    def export(self, directory, *, merge_adapters: bool = False, _barrier: bool = True, **kwargs) -> None:
        """Written by the main process; every rank calls it (a sharded model is gathered first)."""
        if _barrier:
            self.barrier()
        state = full_state_dict(self.model)  # None unless sharded
        if self.is_main_process:
            model, directory = self.unwrapped_model, Path(directory)
            if getattr(model, "heads_file", None):  # a wrapper with rlkit heads
                model.save_pretrained(directory, merge_adapters=merge_adapters, state_dict=state, **kwargs)
            else:
                save_base_model(model, directory, merge_adapters, state, **kwargs)
            self.tokenizer.save_pretrained(directory)
        if _barrier:
            self.barrier()
