"""ILQL through NeMo 2's Lightning trainer (``trainer.fit``), as trlX's NeMo ILQL ran: a
LightningModule around the Megatron GPT with ILQL's heads, whose loss reduction is
rlkit-methods' ILQL loss, and a data module that cycles through the offline store in a
seeded order (``ShuffledCyclicSequence``) under NeMo's Megatron data sampler."""

from __future__ import annotations

from typing import Any, Optional

import lightning.pytorch as L
import torch
from nemo.lightning.megatron_parallel import MegatronLossReduction
from nemo.lightning.pytorch.plugins import MegatronDataSampler

from rlkit_nemo.data import ShuffledCyclicSequence


class ILQLLossReduction(MegatronLossReduction):
    def __init__(self, method) -> None:
        super().__init__()
        self.method = method

    def forward(self, batch, forward_out):
        from rlkit_nemo.losses import ilql_loss

        loss, stats = ilql_loss(self.method, forward_out, batch)
        return loss, {"avg": loss.detach().reshape(1), "stats": stats}

    def reduce(self, losses_reduced_per_micro_batch):
        return torch.cat([x["avg"] for x in losses_reduced_per_micro_batch]).mean()


class ILQLLightningModule(L.LightningModule):
    """Builds its Megatron model in ``configure_model`` (after NeMo set up the parallel
    state), from the Megatron model config and, when given, a full state dict."""

    def __init__(self, model_cfg: dict, vocab_size: int, method, optim, full_state: Optional[dict] = None,
                 cpu: bool = False, seed: int = 1000):
        super().__init__()
        self.seed = seed
        self.model_cfg, self.vocab_size, self.method = model_cfg, vocab_size, method
        self.full_state, self.on_cpu = full_state, cpu
        self.optim = optim
        self.optim.connect(self)  # binds configure_optimizers to Megatron's optimizer
        self._loss = ILQLLossReduction(method)
        self.history: list[dict] = []

    def configure_model(self, vp_stage: Optional[int] = None) -> None:
        if hasattr(self, "module"):
            return
        from rlkit_nemo.models.build import build_gpt
        from rlkit_nemo.models.heads import ILQLHeads
        from rlkit_nemo.models.sharding import load_full_state_dict

        from megatron.core.tensor_parallel import get_cuda_rng_tracker, model_parallel_cuda_manual_seed

        if not get_cuda_rng_tracker().get_states():  # Megatron's layers draw from the tracked RNGs
            model_parallel_cuda_manual_seed(self.seed)
        method = self.method
        self.module = build_gpt(
            self.model_cfg, self.vocab_size, cpu=self.on_cpu,
            make_heads=lambda mc, vocab: ILQLHeads(mc, mc.hidden_size, vocab, two_qs=method.two_qs, alpha=method.alpha),
        )
        if self.full_state is not None:
            load_full_state_dict(self.module, self.full_state, keep=("heads.",))

    def forward(self, batch) -> Any:
        from rlkit_nemo.losses import ilql_inputs
        from rlkit_nemo.models.gpt import causal_padding_mask

        x = ilql_inputs(batch)
        return self.module(x["input_ids"], x["position_ids"], causal_padding_mask(x["attention_mask"]),
                           head_kwargs=x["head_kwargs"])

    def data_step(self, dataloader_iter):
        batch = next(dataloader_iter)
        if isinstance(batch, tuple) and len(batch) == 3:  # (batch, batch_idx, dataloader_idx)
            batch = batch[0]
        device = torch.device("cpu") if self.on_cpu else torch.device("cuda", torch.cuda.current_device())
        fields = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in vars(batch).items()}
        return type(batch)(**fields)

    def forward_step(self, batch):
        return self(batch)

    def training_step(self, batch, batch_idx=None):
        return self.forward_step(batch)

    @property
    def training_loss_reduction(self) -> ILQLLossReduction:
        return self._loss

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        # every steps_for_target_q_sync optimizer steps, where the heads live
        step = self.trainer.global_step
        heads = getattr(self.module, "heads", None)
        if heads is not None and self.method.should_sync_target(step):
            heads.sync_target_q_heads(self.method.alpha)
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        self.history.append({"step": step, "losses/loss": float(loss)})


class ILQLDataModule(L.LightningDataModule):
    """The store as ``global_batch_size * max_steps`` samples in a seeded cyclic order."""

    def __init__(self, store, collate, *, seq_len: int, micro_batch_size: int, global_batch_size: int, max_steps: int, seed: int):
        super().__init__()
        self.store, self.collate, self.seed = store, collate, seed
        self.length = global_batch_size * max_steps
        self.micro_batch_size = micro_batch_size
        self.data_sampler = MegatronDataSampler(seq_len=seq_len, micro_batch_size=micro_batch_size,
                                                global_batch_size=global_batch_size)

    def train_dataloader(self):
        data = ShuffledCyclicSequence(self.length, self.store, self.seed)
        # NeMo's data sampler replaces the sampler with Megatron's, split over data-parallel ranks
        return torch.utils.data.DataLoader(data, batch_size=self.micro_batch_size, collate_fn=self.collate)


def fit_ilql(config, samples, rewards, megatron_cfg, *, pretrained_model=None, cpu: Optional[bool] = None):
    """trlX's NeMo ILQL: ``trainer.fit()`` of NeMo 2's Lightning trainer (``megatron_trainer``)
    over the offline store for ``train.total_steps`` steps. Returns ``(trainer, module)``;
    ``module.module`` is the trained Megatron model and ``module.history`` its losses."""
    from rlkit_methods.ilql.store import ilql_collate_fn, make_experience

    from rlkit_nemo.lightning import megatron_optimizer, megatron_trainer
    from rlkit_nemo.megatron_config import translate
    from rlkit_nemo.trainers.base import load_tokenizer
    from rlkit_nemo.trainers.engine import model_source

    cpu = (not torch.cuda.is_available()) if cpu is None else cpu
    spec = translate(megatron_cfg, cpu=cpu)
    tokenizer = load_tokenizer(config)
    store = make_experience(samples, rewards, tokenizer, config.train.seq_length)
    model_cfg, vocab, full, _ = model_source(spec["model"], pretrained_model, len(tokenizer))
    module = ILQLLightningModule(model_cfg, vocab, config.method, megatron_optimizer(megatron_cfg, cpu=cpu),
                                 full_state=full, cpu=cpu, seed=config.train.seed)
    trainer = megatron_trainer(megatron_cfg, cpu=cpu, max_steps=config.train.total_steps, limit_val_batches=0,
                               num_sanity_val_steps=0, enable_progress_bar=False)
    data = spec["data"]
    trainer.fit(module, ILQLDataModule(store, ilql_collate_fn, seq_len=data["seq_len"], micro_batch_size=data["micro_batch_size"],
                                       global_batch_size=data["global_batch_size"], max_steps=config.train.total_steps,
                                       seed=config.train.seed))
    return trainer, module
