"""``MegatronEngine``: rlkit's engine interface (``rlkit_core.engine``) on megatron-core —
tensor, pipeline and data parallelism, Megatron's DDP and (distributed) optimizer.

It builds the model a method asks for (:mod:`rlkit_nemo.build`), runs its forward kinds
(:mod:`rlkit_nemo.forwards`) through Megatron's schedule (:mod:`rlkit_nemo.schedule`),
samples (:mod:`rlkit_nemo.sampling`), steps the config's optimizer and scheduler
(:mod:`rlkit_nemo.optim`), and saves, loads and exports the weights (:mod:`rlkit_nemo.state`).
It knows nothing of PPO or ILQL. "Processes" in the interface are data-parallel ranks; the
main process is global rank 0. Sizes are checked against the world before a model loads.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist

from rlkit_core.engine import ModelSpec, QGuidance, check_forward_kind
from rlkit_core.process_group import destroy_at_clean_exit
from rlkit_methods.engine_kit import load_tokenizer, mean_stats, split_microbatches

from rlkit_nemo import forwards, state
from rlkit_nemo.config_checks import check_train_keys, require_megatron
from rlkit_nemo.megatron_config import check_engine_kwargs, load_megatron_cfg, translate



def init_distributed() -> None:
    """torch.distributed from torchrun's environment (a world of one without it)."""
    if dist.is_initialized():
        return
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if "WORLD_SIZE" not in os.environ:  # one process: an in-memory store, no port to clash over
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    else:
        dist.init_process_group(backend, rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    destroy_at_clean_exit()
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))


class MegatronEngine:
    is_seq2seq = False

    def __init__(self, config, megatron_cfg: Any = None, pretrained_model: Any = None, **kwargs):
        check_engine_kwargs(dict(kwargs, megatron_cfg=megatron_cfg))
        check_train_keys(config.train)
        require_megatron("the NeMo engine")
        from megatron.core import parallel_state as ps

        self.config, self.ps = config, ps
        self.cpu = not torch.cuda.is_available()
        if self.cpu:  # a supported mode: megatron-core's CUDA requests go to the CPU (gloo)
            from rlkit_nemo import cpu as cpu_mode

            cpu_mode.enable()
        init_distributed()
        raw = load_megatron_cfg(megatron_cfg)
        # the sizes are checked against the processes that are really here (never a hang)
        raw["trainer"] = dict(raw.get("trainer") or {}, devices=dist.get_world_size(), num_nodes=1)
        self.megatron = translate(raw, cpu=self.cpu)
        self.packing = bool(getattr(config.train, "packing", False))
        if self.packing and self.megatron["model"].get("transformer_engine"):
            from rlkit_core.errors import ConfigError

            # TE's attention ignores an explicit mask: packed rows would attend across rows
            raise ConfigError("train.packing: the NeMo engine packs rows with megatron-core's local attention only "
                              "(Transformer Engine's packed path, THD, is not wired); set "
                              "megatron_cfg.model.transformer_engine: false or train.packing: false")
        tp, pp = self.megatron["strategy"]["tensor_model_parallel_size"], self.megatron["strategy"]["pipeline_model_parallel_size"]
        if ps.model_parallel_is_initialized() and (
                ps.get_tensor_model_parallel_world_size(), ps.get_pipeline_model_parallel_world_size()) != (tp, pp):
            ps.destroy_model_parallel()  # an earlier engine in this process used other sizes
        if not ps.model_parallel_is_initialized():
            ps.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp)
        from rlkit_nemo.megatron_config import departures

        self.departures = departures(self.megatron, config, pretrained_model)  # one warning line each
        from rlkit_nemo.optim import yaml_rules

        max_steps = self.megatron["trainer"]["max_steps"]
        if yaml_rules(config) and 0 < max_steps < config.train.total_steps:
            # trlX's NeMo ILQL/SFT trainers ran trainer.max_steps optimizer steps: it ends the run
            config.train.total_steps = max_steps
        self.tokenizer = load_tokenizer(config.tokenizer, trust_remote_code=config.model.trust_remote_code)
        self.source = pretrained_model if pretrained_model is not None else config.model.model_path
        precision = self.megatron["precision"]
        # fp32 weights under a half-precision YAML (no O2): the forward passes run in autocast
        self.autocast = getattr(torch, precision["autocast_dtype"]) if precision and precision["autocast_enabled"] else None
        self.module = self.model = self.ref = self.optimizer = self.schedule = None
        self.half = self.ref_half = None  # the modules the forwards run: Float16Module under O2
        self.last_export = None  # the main process's streamed-export writer (its shards, peak_bytes)

    # --- facts -------------------------------------------------------------------------------

    @property
    def is_main_process(self) -> bool:
        return dist.get_rank() == 0

    @property
    def process_index(self) -> int:
        return self.ps.get_data_parallel_rank()

    @property
    def writes_rank_state(self) -> bool:
        """One rank per data-parallel index writes the loop's per-rank state (TP/PP ranks share it)."""
        return self.ps.get_tensor_model_parallel_rank() == 0 and self.ps.get_pipeline_model_parallel_rank() == 0

    @property
    def num_processes(self) -> int:
        return self.ps.get_data_parallel_world_size()

    @property
    def pipeline_size(self) -> int:
        return self.ps.get_pipeline_model_parallel_world_size()

    @property
    def device(self) -> torch.device:
        return torch.device("cpu") if self.cpu else torch.device("cuda", torch.cuda.current_device())

    def batch_sizes(self) -> tuple[int, int]:
        """(global_batch_size / data-parallel size, micro_batch_size) of the Megatron YAML."""
        data = self.megatron["data"]
        return data["global_batch_size"] // self.num_processes, data["micro_batch_size"]

    # --- the model ---------------------------------------------------------------------------

    def build(self, spec: ModelSpec) -> None:
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
        from megatron.core.distributed.finalize_model_grads import finalize_model_grads
        from megatron.core.optimizer import get_megatron_optimizer
        from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

        from rlkit_nemo.build import build_model, heads_factory, model_source
        from rlkit_nemo.optim import LRSchedule, optimizer_config
        from rlkit_nemo.parallel import check_parallel_sizes
        from rlkit_nemo.pipeline import seeded

        self.spec = spec
        seed = self.config.train.seed
        make_heads = seeded(heads_factory(spec), seed)  # the same heads at every TP/PP layout
        torch.manual_seed(seed)  # the same initial weights on every rank (an HF config is built here)
        model_cfg, vocab, weights, self.hf_config = model_source(self.megatron["model"], self.source, len(self.tokenizer))
        if spec.options.get("disable_dropout"):  # TRL's disable_dropout: none while training either
            model_cfg = dict(model_cfg, hidden_dropout=0.0, attention_dropout=0.0)
        tp = self.ps.get_tensor_model_parallel_world_size()
        check_parallel_sizes(tensor_model_parallel_size=tp, pipeline_model_parallel_size=self.pipeline_size,
                             world_size=dist.get_world_size(), num_attention_heads=model_cfg["num_attention_heads"],
                             num_layers=model_cfg["num_layers"], where="megatron_cfg.model")
        torch.manual_seed(seed)
        model_parallel_cuda_manual_seed(seed)
        self.model_cfg, self.vocab_size = model_cfg, vocab
        # each rank loads its slice; the vocabulary padded for TP; the reference shares the frozen blocks
        module, self.ref = build_model(model_cfg, vocab, weights, spec, make_heads=make_heads, cpu=self.cpu,
                                       device=self.device, tp=tp)
        del weights
        from rlkit_nemo import precision

        # O2: Megatron's Float16Module (half weights, norms and embeddings included; fp32 outputs)
        self.module, self.half = module, precision.wrap(module)
        # the reference shares the policy's frozen blocks, already cast (parameters keep identity)
        self.ref_half = precision.wrap(self.ref) if self.ref is not None else None
        self.model = DistributedDataParallel(
            config=module.config, module=self.half,
            ddp_config=DistributedDataParallelConfig(
                grad_reduce_in_fp32=True, overlap_grad_reduce=False,
                use_distributed_optimizer=self.megatron["optimizer"]["use_distributed_optimizer"]),
        )
        module.config.finalize_model_grads_func = finalize_model_grads
        self.optimizer = get_megatron_optimizer(optimizer_config(self.config, self.megatron["optimizer"]), [self.model])
        precision.scale_losses(module.config, self.optimizer)  # fp16: the dynamic loss scale
        self.schedule = LRSchedule(self.config, self.optimizer, self.megatron)
        torch.manual_seed(seed + self.process_index)  # each data-parallel rank samples with its own stream

    def _outputs(self, model, kind: str, micro_batches: list) -> dict[str, Any] | None:
        """The ``kind``'s outputs of ``model`` (the policy or the reference: this rank's stage)
        over ``micro_batches`` on the last stage (None on the others)."""
        from rlkit_nemo.pipeline import forward_outputs

        # through the half-precision wrapper when there is one (fp32 outputs, as in training)
        model = {id(self.module): self.half, id(self.ref): self.ref_half}.get(id(model), model)
        out = forward_outputs(model, kind, micro_batches, pipelined=self.pipeline_size > 1, autocast=self.autocast)
        if kind == "logits" and out is not None:  # sampling: full, unpadded vocabulary
            from rlkit_nemo.sampling import last_position

            out["output"] = last_position(out["output"], self.vocab_size)
        return out

    def _evaluating(self):
        was = self.module.training
        self.module.eval()
        return was

    @torch.no_grad()
    def forward(self, kind: str, batch: Any, want: Sequence[str] = ()) -> dict[str, Any]:
        """No-grad outputs in micro-batches of the YAML's ``micro_batch_size``, through the
        pipeline stages; the reference (a frozen copy, split into the same stages) the same way.
        The last stage's outputs reach every stage of the replica."""
        from rlkit_nemo.pipeline import from_last_stage

        check_forward_kind(kind)
        micro = forwards.chunk_rows(forwards.to_device(batch, self.device), self.batch_sizes()[1])
        was = self._evaluating()
        try:
            out = self._outputs(self.module, kind, micro)
            if "ref_logprobs" in want and self.ref is not None:
                ref = self._outputs(self.ref, kind, micro)
                if out is not None:
                    out["ref_logprobs"] = ref["logprobs"]
        finally:
            self.module.train(was)
        return from_last_stage(forwards.to_cpu(out) if out is not None else None, self.ps)

    def generate(self, input_ids, attention_mask=None, *, guidance: QGuidance | None = None, **gen_kwargs) -> torch.Tensor:
        """``gen_kwargs.use_cache`` (default true): megatron-core's KV cache; false reruns the
        whole sequence for every new token (:func:`rlkit_nemo.generator.sample_on`)."""
        from rlkit_nemo.generator import sample_on

        return sample_on(self, input_ids, attention_mask, guidance=guidance, **gen_kwargs)

    def default_generator(self):
        """This engine's sampler as an ``rlkit_core.generator.Generator`` (shares the weights)."""
        from rlkit_nemo.generator import NemoGenerator

        return NemoGenerator(self)

    def named_weights(self, *, trainable_only: bool = False):
        """(HF name, tensor) of the model, gathered on every rank; see ``WeightUpdate``."""
        from rlkit_nemo.generator import hf_named_weights

        return hf_named_weights(self, trainable_only=trainable_only)

    def step(self, kind: str, items: Sequence[Any], collate: Callable, loss: Callable) -> dict[str, float]:
        """One optimizer step: ``items`` split into micro-batches of the YAML's
        ``micro_batch_size`` items (the last one short when they do not divide), each collated
        on its own (``Engine.step``; a DPO or reward-model pair is one item, its two rows stay
        together), forward and backward through Megatron's schedule (under PP each micro-batch
        padded to the step's longest, :mod:`rlkit_nemo.packing`). ``train.packing``: each
        micro-batch's rows run as one packed sequence. Each micro-batch's loss and stats count
        by its items."""
        from rlkit_nemo.optim import optimizer_step
        from rlkit_nemo.schedule import forward_backward

        check_forward_kind(kind)
        cpu = time.process_time()  # the whole step's CPU: wall time is noise on a shared machine
        parts = split_microbatches(list(items), self.batch_sizes()[1])
        micro = [forwards.to_device(collate(part), self.device) for part in parts]
        counts = [len(part) for part in parts]
        # Megatron divides every micro-batch's loss by their count: n_k / N it is after that
        weights = [n * len(counts) / sum(counts) for n in counts]
        self.model.train()
        self.model.zero_grad_buffer()
        self.optimizer.zero_grad()
        timer: dict[str, float] = {}
        start = time.time()
        stats = forward_backward(self.model, micro, kind, loss, autocast=self.autocast, timer=timer, weights=weights,
                                 packing=self.packing)
        elapsed = time.time() - start
        stepped, norm = optimizer_step(self.optimizer, self.config.train.max_grad_norm)
        if stepped:
            self.schedule.step()
        out = self._mean_stats(stats, counts)
        out["policy/grad_norm"] = norm
        for group, lr in enumerate(self.schedule.get_last_lr()):
            out[f"learning_rate_group_{group}"] = lr
        out["time/forward"] = timer.get("forward", 0.0)
        out["time/backward"] = elapsed - out["time/forward"]
        out["cpu/step"] = time.process_time() - cpu
        return out

    def _mean_stats(self, stats: list[dict], counts: Sequence[int]) -> dict[str, float]:
        """The last stage's micro-batch stats weighted by their items, sent to every stage and
        averaged over data-parallel ranks."""
        from rlkit_nemo.pipeline import from_last_stage

        mean = mean_stats(stats, counts) if stats else {}
        mean = from_last_stage(mean, self.ps)
        if self.num_processes > 1 and mean:
            keys = sorted(mean)
            total = self.all_reduce_sum(torch.tensor([mean[k] for k in keys], dtype=torch.float64))
            mean = dict(zip(keys, (total / self.num_processes).tolist()))
        return mean

    def sync_target(self, alpha: float) -> None:
        if self.module.heads is not None:  # the last stage holds the heads
            self.module.heads.sync_target_q_heads(alpha)

    # --- collectives -----------------------------------------------------------------------

    def gather_object(self, obj: Any) -> list[Any]:
        if self.num_processes == 1:
            return [obj]
        out = [None] * self.num_processes
        dist.all_gather_object(out, obj, group=self.ps.get_data_parallel_group())
        return out

    def broadcast_object(self, obj: Any) -> Any:
        box = [obj]
        if dist.get_world_size() > 1:
            dist.broadcast_object_list(box, src=0)
        return box[0]

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        out = tensor.detach().clone().to(self.device)
        if self.num_processes > 1:
            dist.all_reduce(out, group=self.ps.get_data_parallel_group())
        return out.to(tensor.device)

    def barrier(self) -> None:
        dist.barrier()

    # --- state -------------------------------------------------------------------------------

    def save_state(self, directory) -> None:
        directory = Path(directory)
        self._share_rng()
        state.save(directory, self.ps, self.module, self.optimizer, self.schedule, is_main=self.is_main_process)
        self.export(directory / "hf_model", _barrier=False, nemo=False)  # the shards are beside it

    def load_state(self, directory) -> None:
        state.load(Path(directory), self.ps, self.module, self.optimizer, self.schedule)

    def _share_rng(self) -> None:
        """One random state (python, numpy, torch) across a model replica's TP and PP ranks:
        the loop writes one state file per data-parallel rank, which all of them write alike."""
        import random

        import numpy as np

        group = self.ps.get_model_parallel_group()
        if dist.get_world_size(group) > 1:
            box = [(random.getstate(), np.random.get_state(), torch.get_rng_state())]
            dist.broadcast_object_list(box, src=dist.get_global_rank(group, 0), group=group)
            random.setstate(box[0][0])
            np.random.set_state(box[0][1])
            torch.set_rng_state(box[0][2])

    def export(self, directory, *, merge_adapters: bool = False, _barrier: bool = True, nemo: bool = True,
               max_shard_size=None, **kwargs) -> None:
        """Written by the main process; every rank calls it. An HF model streams: its tensors
        reach the main process one at a time and are written a layer at a time into shards of
        at most ``max_shard_size`` (default 1GB; :mod:`rlkit_nemo.streamed_export`). A reward
        model or a model with no HF form is gathered to the main process whole, tensor by tensor.
        ``nemo``: NeMo 1's layout beside the HF files (``model_config.yaml``, ``model_weights.ckpt``
        or one ``mp_rank_XX`` per TP rank, each written by its rank; :mod:`rlkit_nemo.nemo_checkpoint`)."""
        from rlkit_nemo.models.sharding import main_state_dict
        from rlkit_nemo.nemo_checkpoint import save_nemo
        from rlkit_nemo.streamed_export import DEFAULT_SHARD_SIZE, export_hf

        if _barrier:
            self.barrier()
        if self.hf_config is not None and not self.spec.options.get("score_head"):  # a reward model: one classifier folder
            self.last_export = export_hf(Path(directory), self.module, self.hf_config, self.tokenizer,
                                         is_main=self.is_main_process, max_shard_size=max_shard_size or DEFAULT_SHARD_SIZE)
        else:
            full = main_state_dict(self.module, self.is_main_process)  # gathered once, on the main process only
            if self.is_main_process:
                state.export(Path(directory), full, self.hf_config, self.tokenizer)
            del full
        if nemo:
            self.barrier()  # the main process made the folder
            save_nemo(directory, self.module, self.model_cfg, self.ps, is_main=self.is_main_process)
        if _barrier:
            self.barrier()

    @property
    def unwrapped_model(self):
        return self.module

