"""The steps ``bench/walks_floor.py`` times beside each side's own: the batches as the model
sees them, and a bare ``GPT2LMHeadModel`` step (forward, token cross-entropy, backward, AdamW)
with its variants (rlkit's one-kernel GELU, no mask, unpadded rows, rows packed as
``train.packing`` packs them, the linear layers' matrix products alone), at float32 or under
CPU bf16 autocast. Imported in both venvs: rlkit's and ``bench/.venv-trlx``."""

from __future__ import annotations

import statistics
from contextlib import nullcontext
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent


# --- batches (both venvs) -------------------------------------------------------------------


def model_inputs(batch: Any, pad_id: int):
    """``(input_ids, attention_mask)`` the model sees for a collated batch of either side:
    ILQL (``.input_ids``), SFT (a mapping), PPO (query and response tensors: rlkit's
    ``PPOTrainBatch.rollouts`` or trlX's ``PPORLBatch``; trlX masks by ``!= pad``)."""
    import torch

    batch = getattr(batch, "rollouts", batch)
    if isinstance(batch, dict) or hasattr(batch, "keys"):
        return batch["input_ids"], batch["attention_mask"]
    if hasattr(batch, "query_tensors"):
        ids = torch.cat([batch.query_tensors, batch.response_tensors], dim=1)
        mask = getattr(batch, "attention_mask", None)
        return ids, mask if mask is not None else ids.ne(pad_id).long()
    return batch.input_ids, batch.attention_mask


def padding_share(masks: list) -> float:
    """The share of positions that are padding over a list of (B, T) attention masks."""
    total = sum(int(m.numel()) for m in masks)
    real = sum(int(m.sum()) for m in masks)
    return 1.0 - real / total if total else 0.0


def packed(input_ids, attention_mask):
    """The batch's real tokens (row order) in full rows of its padded length, no pad:
    ``floor(real / T)`` rows of ``T`` (the last partial row is dropped)."""
    length = input_ids.shape[1]
    real = input_ids[attention_mask.bool()]
    rows = max(1, real.numel() // length)
    return real[: rows * length].reshape(rows, length)


def summary_ms(seconds: list[float]) -> dict[str, float]:
    return {"min_ms": 1000 * min(seconds), "median_ms": 1000 * statistics.median(seconds), "n": len(seconds)}


# --- the timed steps --------------------------------------------------------------------------


def bare_model(model_config: dict[str, Any], seed: int):
    import torch
    import transformers

    settings = dict(model_config)
    config = transformers.AutoConfig.for_model(settings.pop("model_type"), **settings)
    torch.manual_seed(seed)
    return transformers.GPT2LMHeadModel(config).train()


def precision(bf16: bool):
    """The forward's context: CPU bf16 autocast (what ``ACCELERATE_MIXED_PRECISION=bf16`` gives
    rlkit's forwards), or float32."""
    import torch

    return torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else nullcontext()


def bare_step(model, opt, input_ids, attention_mask, bf16: bool = False) -> dict[str, float]:
    """Forward, token cross-entropy, backward, optimizer step; CPU seconds of each part, and the loss."""
    import torch.nn.functional as F

    clock = time.process_time
    t0 = clock()
    with precision(bf16):
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    labels = input_ids[:, 1:].masked_fill(attention_mask[:, 1:] == 0, -100)
    loss = F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
    t1 = clock()
    loss.backward()
    t2 = clock()
    opt.step()
    opt.zero_grad(set_to_none=True)
    t3 = clock()
    return {"forward": t1 - t0, "backward": t2 - t1, "optimizer": t3 - t2, "total": t3 - t0, "loss": loss.item()}


def packed_inputs(input_ids, attention_mask, pack_rows, attention_cost: float | None):
    """The batch as ``train.packing`` feeds the model (``pack_rows``: rlkit_accelerate's, rows in
    bins, position ids restarting at 0 on every row, no mask): ``(ids, position_ids, keep,
    labels)`` (K, L), (K, L), (K, L) bool, (M,): the packed positions whose next token the padded
    step counts, and those tokens (a left-padded row's first token is not counted: no real
    position precedes it)."""
    import torch.nn.functional as F

    p = pack_rows(attention_mask, attention_cost)
    next_ids = F.pad(input_ids[:, 1:], (0, 1))  # (B, T) the token position t predicts
    counted = p.real & F.pad(attention_mask[:, 1:].bool(), (0, 1))  # (B, T)
    keep = p.keep(counted)
    return p.pack(input_ids), p.position_ids, keep, p.pack(next_ids)[keep]


def packed_bare_step(model, opt, input_ids, position_ids, keep, labels, bf16: bool = False) -> dict[str, float]:
    """:func:`bare_step` on packed rows: the LM head at the counted positions only, as rlkit's
    packed forward runs it (``logits_to_keep``)."""
    import torch.nn.functional as F

    clock = time.process_time
    t0 = clock()
    with precision(bf16):
        # no cache: transformers reads packed rows from the position ids only without one
        logits = model(input_ids=input_ids, position_ids=position_ids, use_cache=False, logits_to_keep=keep).logits
    loss = F.cross_entropy(logits.float(), labels)
    t1 = clock()
    loss.backward()
    t2 = clock()
    opt.step()
    opt.zero_grad(set_to_none=True)
    t3 = clock()
    return {"forward": t1 - t0, "backward": t2 - t1, "optimizer": t3 - t2, "total": t3 - t0, "loss": loss.item()}


def fused_gelu(model) -> int:
    """rlkit's GELU swap (``rlkit_accelerate/kernels.py``, loaded by path: the trlX venv has no
    rlkit) on ``model``, so either venv can time the bare model as rlkit runs it."""
    import importlib.util

    path = BENCH.parent / "plugins" / "rlkit_accelerate" / "rlkit_accelerate" / "kernels.py"
    loader = importlib.util.spec_from_file_location("_rlkit_kernels", path)
    kernels = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(kernels)
    return kernels.fuse_activations(model)


def linear_matmuls(model, bf16: bool = False):
    """A function of the token count that runs the model's linear layers' matrix products alone,
    as a training step has them: per layer ``x W`` (forward), ``g W^T`` and ``x^T g``
    (backward), at the layer's shapes (GPT-2's ``Conv1D`` and the tied LM head): the part of a
    step no implementation of the same arithmetic can drop."""
    import torch

    shapes = []
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if type(module).__name__ == "Conv1D":
            shapes.append(tuple(weight.shape))  # (in, out)
        elif isinstance(module, torch.nn.Linear):
            shapes.append((weight.shape[1], weight.shape[0]))
    cache: dict[int, list] = {}
    dtype = torch.bfloat16 if bf16 else torch.float32  # autocast runs the products in bf16

    def run(tokens: int) -> None:
        if tokens not in cache:
            cache[tokens] = [tuple(torch.randn(*shape, dtype=dtype) for shape in ((tokens, i), (i, o), (tokens, o)))
                             for i, o in shapes]
        for x, w, g in cache[tokens]:
            x @ w
            g @ w.T
            x.T @ g

    run.shapes = shapes
    return run


def measure(side_step, batches: list, model_config: dict[str, Any], optimizer: dict[str, Any], fused: bool,
            pad_id: int, rounds: int, steps: int, seed: int, bf16: bool = False, pack_rows=None) -> dict[str, Any]:
    """Rounds of ``steps`` steps of each variant, interleaved; per-step CPU seconds.

    Variants: the side's step; the bare model as the venv's transformers builds it; the same
    with rlkit's one-kernel GELU (same arithmetic to 5e-7); that on the same rows with an
    all-ones mask (the attention path a batch without padding takes); on the real tokens only,
    packed into full rows; and, given ``pack_rows`` (rlkit's venv), on the rows packed as
    ``train.packing`` packs them. ``bf16``: every bare forward under CPU bf16 autocast."""
    import torch

    inputs = [model_inputs(b, pad_id) for b in batches]
    ones = [(ids, torch.ones_like(mask)) for ids, mask in inputs]
    unpadded = [(u, torch.ones_like(u)) for u in (packed(ids, mask) for ids, mask in inputs)]
    kwargs = dict(optimizer.get("kwargs", {}))
    kwargs["betas"] = tuple(kwargs.get("betas", (0.9, 0.999)))
    models = {}
    for name in ("plain", "fused"):
        model = bare_model(model_config, seed)
        if name == "fused" and not fused_gelu(model):
            raise SystemExit("walks_floor: no gelu_new module to fuse in the bare model")
        models[name] = (model, torch.optim.AdamW(model.parameters(), **kwargs, **({"fused": True} if fused else {})))
    plan = {"side step": None, "bare step": ("plain", bare_step, inputs), "bare, fused GELU": ("fused", bare_step, inputs),
            "bare, fused GELU, no mask": ("fused", bare_step, ones),
            "bare, fused GELU, unpadded": ("fused", bare_step, unpadded)}
    if pack_rows is not None:  # the bins' width as the engine sizes them (rlkit_accelerate.packing.attention_cost)
        cost = 1.0 / (6 * models["fused"][0].get_output_embeddings().weight.shape[-1])
        plan["bare, fused GELU, packed"] = ("fused", packed_bare_step,
                                            [packed_inputs(ids, mask, pack_rows, cost) for ids, mask in inputs])
    plan["matmuls only"] = "matmuls"
    matmuls = linear_matmuls(models["fused"][0], bf16)
    rows = max(ids.shape[0] for ids, _ in inputs)
    full = [i for i, (ids, _) in enumerate(inputs) if ids.shape[0] == rows]  # PPO: 128 rollouts are batches of 100 and 28
    times: dict[str, list[float]] = {v: [] for v in plan}
    parts: dict[str, list[float]] = {"forward": [], "backward": [], "optimizer": []}
    for name, step, batch_list in (p for p in plan.values() if isinstance(p, tuple)):
        step(*models[name], *batch_list[0], bf16=bf16)  # first-call allocations, off the clock
    matmuls(inputs[full[0]][0].numel())
    for r in range(rounds):
        for variant, how in plan.items():
            for k in range(steps):
                i = full[(r * steps + k) % len(full)]
                if how is None or how == "matmuls":
                    start = time.process_time()
                    side_step(i) if how is None else matmuls(inputs[i][0].numel())
                    times[variant].append(time.process_time() - start)
                    continue
                name, step, batch_list = how
                split = step(*models[name], *batch_list[i], bf16=bf16)
                times[variant].append(split.pop("total"))
                if variant == "bare, fused GELU":
                    for part in parts:
                        parts[part].append(split[part])
    return {
        "variants": {v: summary_ms(t) for v, t in times.items()},
        "bare_parts": {p: summary_ms(t) for p, t in parts.items()},
        "padding_share": padding_share([inputs[i][1] for i in full]),
        "shapes": sorted({tuple(inputs[i][0].shape) for i in full}),
        "unpadded_shapes": sorted({tuple(unpadded[i][0].shape) for i in full}),
        "packed_shapes": sorted({tuple(plan["bare, fused GELU, packed"][2][i][0].shape) for i in full})
        if pack_rows is not None else [],
        "fused_adamw": fused, "bf16": bf16, "torch": torch.__version__,
    }
