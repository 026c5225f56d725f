"""NeMo checkpoints of trlX's era: read them, and write one.

Layouts read (what NeMo 1.x and trlX's ``save_pretrained`` wrote):

* a ``.nemo`` archive: a tar (optionally gzipped) of ``model_config.yaml`` and the weights below;
* a folder with ``model_weights.ckpt`` (TP=1, PP=1), or ``mp_rank_XX/model_weights.ckpt``
  (one per tensor-parallel rank), or ``tp_rank_XX_pp_rank_YYY/model_weights.ckpt`` (TP x PP),
  with ``model_config.yaml`` beside them, or without it (trlX's folders: the architecture is
  then the Megatron YAML's ``model`` section).

Weight names: NeMo 1's own GPT (``model.language_model.encoder.layers.N.self_attention.
query_key_value.weight``, ``...mlp.dense_h_to_4h[_2]``; ``model.module.`` under O2) or
megatron-core's (``model.decoder.layers.N...``, TE's fused-norm names included, see
:mod:`rlkit_nemo.te`). Layers are numbered within each pipeline stage. ``megatron_legacy: true``
checkpoints (trlX's Llama conversion) keep each TP shard's q, k, v as three blocks; they are
regrouped into megatron-core's per-group layout. A ``layernorm1p`` model stores its norm weights
minus one; the local layer spec gets them plus one. A rank reads only the shard files holding
its slice (the same TP size: its own ``mp_rank``), each tensor loaded on first use
(``torch.load(mmap=True, weights_only=True)``); other TP sizes are merged and re-split per tensor.

:func:`save_nemo` writes NeMo 1's layout (``model_config.yaml`` + ``model_weights.ckpt``, one
``mp_rank_XX`` per TP rank), which trlX's and NeMo 1's loaders read and :class:`NeMoWeights`
reads back.
"""

from __future__ import annotations

import os
import re
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, NamedTuple, Optional

import torch

from rlkit_core.errors import RlkitError

from rlkit_nemo.sliced_loading import Source

WEIGHTS = "model_weights.ckpt"
CONFIG = "model_config.yaml"
SHARD_DIR = re.compile(r"^(?:mp_rank_(\d+)|tp_rank_(\d+)_pp_rank_(\d+))$")
# megatron-core local-spec suffix inside layer N -> NeMo 1's
LEGACY_LAYER = {
    "input_layernorm.weight": "input_layernorm.weight", "input_layernorm.bias": "input_layernorm.bias",
    "self_attention.linear_qkv.weight": "self_attention.query_key_value.weight",
    "self_attention.linear_qkv.bias": "self_attention.query_key_value.bias",
    "self_attention.linear_proj.weight": "self_attention.dense.weight", "self_attention.linear_proj.bias": "self_attention.dense.bias",
    "pre_mlp_layernorm.weight": "post_attention_layernorm.weight", "pre_mlp_layernorm.bias": "post_attention_layernorm.bias",
    "mlp.linear_fc1.weight": "mlp.dense_h_to_4h.weight", "mlp.linear_fc1.bias": "mlp.dense_h_to_4h.bias",
    "mlp.linear_fc2.weight": "mlp.dense_4h_to_h.weight", "mlp.linear_fc2.bias": "mlp.dense_4h_to_h.bias",
}
LEGACY_TOP = {
    "embedding.word_embeddings.weight": "language_model.embedding.word_embeddings.weight",
    "embedding.position_embeddings.weight": "language_model.embedding.position_embeddings.weight",
    "decoder.final_layernorm.weight": "language_model.encoder.final_layernorm.weight",
    "decoder.final_layernorm.bias": "language_model.encoder.final_layernorm.bias",
    "output_layer.weight": "language_model.output_layer.weight",
}
FROM_LEGACY_TOP = {v: k for k, v in LEGACY_TOP.items()}
FROM_LEGACY_LAYER = {v: k for k, v in LEGACY_LAYER.items()}
MCORE_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.(.*)$")
LEGACY_LAYER_NAME = re.compile(r"^language_model\.encoder\.layers\.(\d+)\.(.*)$")
COLUMN_PARALLEL = ("linear_qkv.weight", "linear_qkv.bias", "linear_fc1.weight", "linear_fc1.bias",
                   "word_embeddings.weight", "output_layer.weight")
ROW_PARALLEL = ("linear_proj.weight", "linear_fc2.weight")
NORM_WEIGHTS = ("input_layernorm.weight", "pre_mlp_layernorm.weight", "final_layernorm.weight")


def is_nemo_checkpoint(path: Any) -> bool:
    """A ``.nemo`` archive, or a folder of NeMo's weight files."""
    if not isinstance(path, (str, os.PathLike)):
        return False
    p = Path(path)
    if p.is_file():
        return p.suffix == ".nemo" or (tarfile.is_tarfile(p) and not p.suffix == ".ckpt")
    return p.is_dir() and ((p / WEIGHTS).is_file() or any(SHARD_DIR.match(c.name) and (c / WEIGHTS).is_file() for c in p.iterdir()))


class NeMoCheckpoint:
    """A NeMo checkpoint's config (or None) and shard files by (TP rank, PP rank)."""

    def __init__(self, path: str | os.PathLike):
        self.path, self._tmp = Path(path), None
        folder = self.path
        if self.path.is_file():  # .nemo: unpack next to nothing the user owns
            self._tmp = tempfile.TemporaryDirectory(prefix="rlkit_nemo_")
            folder = Path(self._tmp.name)
            with tarfile.open(self.path, "r:*") as tar:
                members = [m for m in tar.getmembers() if m.isfile() and Path(m.name).name in (CONFIG, WEIGHTS)]
                kwargs = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
                tar.extractall(folder, members=members, **kwargs)
        self.folder = folder
        self.shards: Dict[tuple[int, int], Path] = {}
        if (folder / WEIGHTS).is_file():
            self.shards[(0, 0)] = folder / WEIGHTS
        for child in folder.iterdir() if folder.is_dir() else ():
            match = SHARD_DIR.match(child.name)
            if match and (child / WEIGHTS).is_file():
                tp = int(match.group(1) if match.group(1) is not None else match.group(2))
                self.shards[(tp, int(match.group(3) or 0))] = child / WEIGHTS
        if not self.shards:
            raise RlkitError(f"{self.path}: no {WEIGHTS} (nor mp_rank_XX/{WEIGHTS}); not a NeMo checkpoint")
        self.tp = 1 + max(t for t, _ in self.shards)
        self.pp = 1 + max(p for _, p in self.shards)
        if len(self.shards) != self.tp * self.pp:
            raise RlkitError(f"{self.path}: has {len(self.shards)} shard files, expected TP {self.tp} x PP {self.pp}")

    def config(self) -> Optional[dict[str, Any]]:
        """The checkpoint's ``model_config.yaml`` (NeMo's model section), or None."""
        path = self.folder / CONFIG
        if not path.is_file():
            return None
        from rlkit_nemo.megatron_config import load_megatron_cfg

        cfg = load_megatron_cfg({"model": dict(_read_yaml(path))})["model"]
        return dict(cfg.get("model", cfg))  # a full NeMo config nests the model section


def _read_yaml(path: Path) -> dict:
    import yaml

    with open(path) as f:
        return yaml.safe_load(f) or {}


def _load(path: Path) -> Dict[str, torch.Tensor]:
    try:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError:  # a checkpoint in torch's old (non-zip) format cannot be mapped
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - one line naming the file, whatever torch raised
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RlkitError(f"{path}: cannot read the NeMo weights ({first[:200]})") from None
    state = state.get("state_dict", state)  # a Lightning checkpoint holds them under state_dict
    return {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}


class Lazy(NamedTuple):
    shape: tuple
    read: Callable[[], torch.Tensor]


def to_local_names(raw: Dict[str, torch.Tensor], *, legacy_qkv: bool, heads: int, groups: int) -> Dict[str, Lazy]:
    """One shard's tensors under megatron-core's local-spec names (layers still numbered within
    the stage), each read only when asked for (the shapes come from the file's header).
    ``heads`` and ``groups`` are this shard's (``megatron_legacy`` regrouping)."""
    from rlkit_nemo.convert import fuse_qkv
    from rlkit_nemo.te import is_extra_state, local_name

    out: Dict[str, Lazy] = {}
    for key, tensor in raw.items():
        name = re.sub(r"^model\.(module\.)?", "", key)
        if is_extra_state(name) or "inv_freq" in name:
            continue
        legacy = LEGACY_LAYER_NAME.match(name)
        if legacy:
            layer, rest = legacy.groups()
            if rest.startswith("mlp.dense_h_to_4h_2."):
                continue  # joined with dense_h_to_4h below
            mapped = FROM_LEGACY_LAYER.get(rest)
            if mapped is None:
                continue
            target = f"decoder.layers.{layer}.{mapped}"
            up = key.replace("dense_h_to_4h.", "dense_h_to_4h_2.")
            if rest.startswith("mlp.dense_h_to_4h.") and up in raw:  # a gated MLP: [gate; up]
                g, u = tensor, raw[up]
                out[target] = Lazy((g.shape[0] + u.shape[0], *g.shape[1:]), lambda g=g, u=u: torch.cat([g, u]))
            elif "query_key_value" in rest and legacy_qkv:  # [q; k; v] blocks -> per group
                out[target] = Lazy(tuple(tensor.shape), lambda t=tensor: fuse_qkv(*_qkv_blocks(t, heads, groups), heads, groups))
            else:
                out[target] = Lazy(tuple(tensor.shape), lambda t=tensor: t)
        elif name in FROM_LEGACY_TOP:
            out[FROM_LEGACY_TOP[name]] = Lazy(tuple(tensor.shape), lambda t=tensor: t)
        elif name.startswith(("decoder.", "embedding.", "output_layer.")):
            out[local_name(name)] = Lazy(tuple(tensor.shape), lambda t=tensor: t)
    return out


def _qkv_blocks(qkv: torch.Tensor, heads: int, groups: int):
    d = qkv.shape[0] // (heads + 2 * groups)
    return qkv.split([heads * d, groups * d, groups * d])


def _split_dim(name: str) -> Optional[int]:
    if name.endswith(COLUMN_PARALLEL):
        return 0
    return 1 if name.endswith(ROW_PARALLEL) else None


class NeMoWeights(Source):
    """The full Megatron state dict of a :class:`NeMoCheckpoint`; a rank's slice comes from the
    shard files that hold it. ``model``: the model section (rlkit's keys: ``num_layers``,
    heads, ``activation``), ``norm_offset``: added to the norm weights (1.0 for a layernorm1p
    checkpoint loaded into plain LayerNorms)."""

    def __init__(self, checkpoint: NeMoCheckpoint, model: dict[str, Any], *, legacy_qkv: bool = False, norm_offset: float = 0.0):
        self.ckpt, self.norm_offset = checkpoint, norm_offset
        self.glu = model.get("activation") in ("swiglu", "geglu", "reglu")
        heads = model["num_attention_heads"]
        self.kwargs = dict(legacy_qkv=legacy_qkv, heads=heads // checkpoint.tp,
                           groups=(model.get("num_query_groups") or heads) // checkpoint.tp)
        if model["num_layers"] % checkpoint.pp:
            raise RlkitError(f"{checkpoint.path}: {checkpoint.pp} pipeline stages do not divide {model['num_layers']} layers")
        self.per_stage = model["num_layers"] // checkpoint.pp
        self._shards: Dict[tuple[int, int], Dict[str, Lazy]] = {}
        self.where: Dict[str, tuple[int, str]] = {}  # global name -> (stage, name in the stage's shard)
        for stage in range(checkpoint.pp):
            for name in self._shard(0, stage):
                self.where[self._global(name, stage)] = (stage, name)

    def _shard(self, tp: int, stage: int) -> Dict[str, Lazy]:
        if (tp, stage) not in self._shards:
            self._shards[(tp, stage)] = to_local_names(_load(self.ckpt.shards[(tp, stage)]), **self.kwargs)
        return self._shards[(tp, stage)]

    def _global(self, name: str, stage: int) -> str:
        m = MCORE_LAYER.match(name)
        return f"decoder.layers.{int(m.group(1)) + stage * self.per_stage}.{m.group(2)}" if m else name

    def _part(self, name: str, tp: int) -> torch.Tensor:
        stage, local = self.where[name]
        value = self._shard(tp, stage)[local].read()
        if self.norm_offset and name.endswith(NORM_WEIGHTS):
            value = value + self.norm_offset
        return value

    def names(self):
        return self.where.keys()

    def has(self, name):
        return name in self.where

    def _dim(self, name: str) -> Optional[int]:
        return _split_dim(name) if self.ckpt.tp > 1 else None

    def _shard_shape(self, name: str) -> tuple:
        stage, local = self.where[name]
        return self._shard(0, stage)[local].shape

    def shape(self, name):
        shape = list(self._shard_shape(name))
        dim = self._dim(name)
        if dim is not None:
            shape[dim] *= self.ckpt.tp
        return tuple(shape)

    def full(self, name):
        dim = self._dim(name)
        if dim is None:
            return self._part(name, 0)
        parts = [self._part(name, t) for t in range(self.ckpt.tp)]
        if self._is_glu(name):  # each shard is [gate_t; up_t]
            return torch.cat([torch.cat([p.chunk(2)[half] for p in parts]) for half in (0, 1)])
        return torch.cat(parts, dim=dim)

    def _is_glu(self, name: str) -> bool:
        return self.glu and ".mlp.linear_fc1." in name

    def rows(self, name, start, stop):
        if self._dim(name) != 0:
            return self.full(name)[start:stop]
        rows = self._shard_shape(name)[0]
        if self._is_glu(name):  # full rows: [gate (tp x h); up (tp x h)], shard t: [gate_t; up_t]
            h = rows // 2
            half = h * self.ckpt.tp
            pieces = [(i, (i % half) // h, (i % half) % h + (h if i >= half else 0)) for i in range(start, min(stop, 2 * half))]
        else:
            n = rows
            pieces = [(i, i // n, i % n) for i in range(start, min(stop, n * self.ckpt.tp))]
        return _gather_rows(pieces, lambda t: self._part(name, t))

    def cols(self, name, start, stop):
        if self._dim(name) != 1:
            return self.full(name)[:, start:stop]
        m = self._shard_shape(name)[1]
        by_shard = {}
        for j in range(start, min(stop, m * self.ckpt.tp)):
            by_shard.setdefault(j // m, []).append(j % m)
        return torch.cat([self._part(name, t)[:, cols] for t, cols in by_shard.items()], dim=1)


def _gather_rows(pieces, shard: Callable[[int], torch.Tensor]) -> torch.Tensor:
    """Rows from shards: ``pieces`` = (full row, shard, row in shard), in order; runs of
    consecutive rows of one shard are sliced at once."""
    if not pieces:
        return shard(0)[:0]
    out, run = [], [pieces[0]]
    for piece in pieces[1:]:
        if piece[1] == run[-1][1] and piece[2] == run[-1][2] + 1:
            run.append(piece)
        else:
            out.append(shard(run[0][1])[run[0][2]:run[-1][2] + 1])
            run = [piece]
    out.append(shard(run[0][1])[run[0][2]:run[-1][2] + 1])
    return torch.cat(out)


# --- writing ------------------------------------------------------------------------------

NEMO1_NORMS = {"RMSNorm": "rmsnorm", "LayerNorm": "layernorm"}
NEMO1_KEYS = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups", "kv_channels",
              "encoder_seq_length", "max_position_embeddings", "layernorm_epsilon", "bias", "rotary_base",
              "share_embeddings_and_output_weights", "tensor_model_parallel_size", "pipeline_model_parallel_size",
              "make_vocab_size_divisible_by", "init_method_std", "hidden_dropout", "attention_dropout")


def shard_path(directory: Path, tp_rank: int, pp_rank: int, tp: int, pp: int) -> Path:
    """NeMo's file for a (TP, PP) position: ``model_weights.ckpt``, ``mp_rank_XX/...`` or
    ``tp_rank_XX_pp_rank_YYY/...``."""
    if tp == 1 and pp == 1:
        return directory / WEIGHTS
    if pp == 1:
        return directory / f"mp_rank_{tp_rank:02d}" / WEIGHTS
    return directory / f"tp_rank_{tp_rank:02d}_pp_rank_{pp_rank:03d}" / WEIGHTS


def to_nemo1_names(local: Dict[str, torch.Tensor], *, glu: bool, tied: bool) -> Dict[str, torch.Tensor]:
    """A rank's tensors (megatron-core names, layers numbered within the stage; rlkit's heads
    left out) under NeMo 1's GPT names, a gated MLP's [gate; up] as dense_h_to_4h and _2."""
    from rlkit_nemo.te import is_extra_state, local_name

    out = {}
    for name, tensor in local.items():
        name = local_name(name)
        if is_extra_state(name) or name.startswith("heads.") or (tied and name == "output_layer.weight"):
            continue
        m = MCORE_LAYER.match(name)
        if m is None:
            if name in LEGACY_TOP:
                out["model." + LEGACY_TOP[name]] = tensor
            continue
        layer, rest = m.groups()
        base = f"model.language_model.encoder.layers.{layer}."
        if rest not in LEGACY_LAYER:
            raise RlkitError(f"{name}: has no NeMo 1 name; the model cannot be saved in NeMo's layout")
        if glu and rest.startswith("mlp.linear_fc1."):
            gate, up = tensor.chunk(2)
            out[base + LEGACY_LAYER[rest]] = gate
            out[base + LEGACY_LAYER[rest].replace("dense_h_to_4h", "dense_h_to_4h_2")] = up
        else:
            out[base + LEGACY_LAYER[rest]] = tensor
    return {k: v.detach().cpu().clone().contiguous() for k, v in out.items()}


def nemo1_model_config(model: dict[str, Any], padded_vocab_size: int) -> dict[str, Any]:
    """The model section in NeMo 1's keys (the inverse of :mod:`rlkit_nemo.model_keys`)."""
    out = {k: model[k] for k in NEMO1_KEYS if model.get(k) is not None}
    activation = model.get("activation", "gelu")
    out.update(
        # TE's zero-centred norms hold w - 1, as NeMo 1's layernorm1p stored them
        normalization="layernorm1p" if model.get("layernorm_zero_centered_gamma") else NEMO1_NORMS[model.get("normalization", "LayerNorm")],
        activation="gelu" if activation == "gelu_tanh" else activation.replace("_", "-"),
        openai_gelu=activation == "gelu_tanh",
        position_embedding_type=model.get("position_embedding_type", "learned_absolute"),
        rotary_percentage=float(model.get("rotary_percent", 1.0)),
        padded_vocab_size=int(padded_vocab_size),
        megatron_legacy=False, mcore_gpt=False, transformer_engine=False,
        precision={"16": 16, "bf16": "bf16"}.get(str(model.get("params_dtype", "32")), 32),
    )
    if model.get("rope_scaling"):
        out["rope_scaling"] = dict(model["rope_scaling"])  # rlkit's: NeMo 1 had no Llama 3 scaling
    if "rotary_base" in out:
        out["rotary_base"] = float(out["rotary_base"])
    return out


def save_nemo(directory: str | os.PathLike, module: torch.nn.Module, model: dict[str, Any], ps, *, is_main: bool) -> None:
    """This rank's shard in NeMo 1's layout (written by data-parallel rank 0 of each (TP, PP)
    position), and ``model_config.yaml`` by the main process. Collective-free."""
    import yaml

    from rlkit_nemo.models.sharding import _tensors

    directory = Path(directory)
    tp, pp = ps.get_tensor_model_parallel_world_size(), ps.get_pipeline_model_parallel_world_size()
    if ps.get_data_parallel_rank() == 0:
        glu = model.get("activation") in ("swiglu", "geglu", "reglu")
        tied = bool(model.get("share_embeddings_and_output_weights", True))
        tensors = to_nemo1_names(_tensors(module), glu=glu, tied=tied)
        path = shard_path(directory, ps.get_tensor_model_parallel_rank(), ps.get_pipeline_model_parallel_rank(), tp, pp)
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(tensors, path)
    if is_main:
        directory.mkdir(parents=True, exist_ok=True)
        config = nemo1_model_config(dict(model, tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp), module.vocab_size)
        (directory / CONFIG).write_text(yaml.safe_dump(config, sort_keys=False))
