"""Transformer Engine (TE) layers, and the weight names of megatron-core's two layer specs.

With TE installed on a GPU (:func:`rlkit_nemo.model_keys.te_usable`) the models use
megatron-core's TE layer spec: fused attention, FP8, sequence parallelism. Its layers fuse each
pre-norm into the linear layer after it, so the same weights go by other names:

=============================================  ==============================================
local spec (what :mod:`rlkit_nemo.convert` and  TE spec
NeMo checkpoints without TE use)
=============================================  ==============================================
``layers.N.input_layernorm.weight`` / ``.bias``  ``layers.N.self_attention.linear_qkv.layer_norm_weight`` / ``_bias``
``layers.N.pre_mlp_layernorm.weight`` / ``.bias``  ``layers.N.mlp.linear_fc1.layer_norm_weight`` / ``_bias``
=============================================  ==============================================

Every other name is shared; TE modules add ``..._extra_state`` entries (FP8 scaling state),
which carry no weights. Loading, exporting and NeMo checkpoints work in local names; these
functions translate at the edges.
"""

from __future__ import annotations

import re
from typing import Mapping, TypeVar

V = TypeVar("V")
# (local-spec suffix, TE-spec suffix) inside decoder layer N
FUSED_NORMS = (
    ("input_layernorm.weight", "self_attention.linear_qkv.layer_norm_weight"),
    ("input_layernorm.bias", "self_attention.linear_qkv.layer_norm_bias"),
    ("pre_mlp_layernorm.weight", "mlp.linear_fc1.layer_norm_weight"),
    ("pre_mlp_layernorm.bias", "mlp.linear_fc1.layer_norm_bias"),
)
_LAYER = re.compile(r"^(?P<head>(?:.*\.)?layers\.\d+\.)(?P<rest>.*)$")
_TO_TE = dict(FUSED_NORMS)
_TO_LOCAL = {te: local for local, te in FUSED_NORMS}


def _rename(name: str, table: Mapping[str, str]) -> str:
    match = _LAYER.match(name)
    if match is None or match.group("rest") not in table:
        return name
    return match.group("head") + table[match.group("rest")]


def te_name(local_name: str) -> str:
    """A local-spec parameter name -> the TE spec's name for the same tensor."""
    return _rename(local_name, _TO_TE)


def local_name(te_name_: str) -> str:
    """A TE-spec parameter name -> the local spec's name (names they share are unchanged)."""
    return _rename(te_name_, _TO_LOCAL)


def is_extra_state(name: str) -> bool:
    return name.endswith("_extra_state")


def local_to_te(state: Mapping[str, V]) -> dict[str, V]:
    """A local-spec state dict in the TE spec's names (the ``_extra_state`` entries are TE's
    own: load with ``strict=False`` or let TE create them)."""
    return {te_name(k): v for k, v in state.items()}


def te_to_local(state: Mapping[str, V]) -> dict[str, V]:
    """A TE-spec state dict in the local spec's names, without TE's ``_extra_state`` entries."""
    return {local_name(k): v for k, v in state.items() if not is_extra_state(k)}


def layer_spec(config, *, use_te: bool):
    """megatron-core's TE layer spec when ``use_te`` (TE installed, GPU), else its plain-torch
    local spec, whose norms cannot run sequence parallelism."""
    from megatron.core.models.gpt import gpt_layer_specs

    if use_te:
        return gpt_layer_specs.get_gpt_layer_with_transformer_engine_spec()
    if config.sequence_parallel:
        from rlkit_core.errors import ConfigError

        raise ConfigError("megatron_cfg.model.sequence_parallel: needs Transformer Engine's layers (a GPU with "
                          "transformer_engine installed); set it to false")
    return gpt_layer_specs.get_gpt_layer_local_spec(normalization=config.normalization)
