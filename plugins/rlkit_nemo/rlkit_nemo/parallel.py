"""Tensor/pipeline-parallel sizes: checked before anything is built (no megatron import)."""

from __future__ import annotations

from rlkit_core.errors import ConfigError


def check_parallel_sizes(
    *, tensor_model_parallel_size: int, pipeline_model_parallel_size: int, world_size: int,
    num_attention_heads: int, num_layers: int, where: str = "model",
) -> int:
    """Raise a one-line ConfigError for sizes Megatron cannot split; return the data-parallel size."""
    tp, pp = tensor_model_parallel_size, pipeline_model_parallel_size
    if tp < 1 or pp < 1:
        raise ConfigError(f"{where}.tensor_model_parallel_size and pipeline_model_parallel_size must be >= 1, got TP={tp}, PP={pp}")
    if num_attention_heads % tp:
        raise ConfigError(
            f"{where}.tensor_model_parallel_size={tp} does not divide {where}.num_attention_heads={num_attention_heads}; "
            f"choose a TP size that divides the number of heads"
        )
    if world_size % (tp * pp):
        raise ConfigError(
            f"{where}: TP={tp} x PP={pp} = {tp * pp} does not divide the world size {world_size} "
            f"(devices x nodes); choose sizes whose product divides it"
        )
    if num_layers % pp:
        raise ConfigError(
            f"{where}.pipeline_model_parallel_size={pp} does not divide {where}.num_layers={num_layers}; "
            f"choose a PP size that divides the number of layers"
        )
    return world_size // (tp * pp)
