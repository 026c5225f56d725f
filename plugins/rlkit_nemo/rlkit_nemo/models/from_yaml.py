"""Build a Megatron GPT (``HeadedGPTModel``) from the ``model`` section of a Megatron YAML.

The keys are trlX/NeMo 1's (``num_layers``, ``hidden_size``, ``ffn_hidden_size``,
``num_attention_heads``, ``encoder_seq_length``, ``normalization``, ``activation``, ``bias``,
``position_embedding_type``, ``share_embeddings_and_output_weights``, dropout, ...); the
architecture of a converted HF model comes from :mod:`rlkit_nemo.convert` in the same keys.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

import torch
import torch.nn.functional as F

from megatron.core import parallel_state
from megatron.core.transformer import TransformerConfig

from rlkit_nemo.models.gpt import HeadedGPTModel

ACTIVATIONS = {
    "gelu": (F.gelu, False),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), False),  # GPT-2's gelu_new
    "relu": (F.relu, False),
    "swiglu": (F.silu, True),  # Llama: silu(gate) * up
    "geglu": (F.gelu, True),
    "reglu": (F.relu, True),
    "squared_relu": (lambda x: F.relu(x) ** 2, False),
}
# the plain-torch layer spec (see gpt.layer_spec) takes no fused kernels
NO_FUSED_KERNELS = dict.fromkeys(("bias_activation_fusion", "masked_softmax_fusion", "bias_dropout_fusion", "apply_rope_fusion",
                                  "gradient_accumulation_fusion", "persist_layer_norm"), False)
FP8_KEYS = ("fp8_margin", "fp8_interval", "fp8_amax_history_len", "fp8_amax_compute_algo")
DTYPES = {"32": torch.float32, "16": torch.float16, "bf16": torch.bfloat16}


def precision_dtype(precision: Any) -> torch.dtype:
    key = str(precision).replace("-mixed", "").replace("-true", "")
    return DTYPES.get(key, torch.float32)


def transformer_config(model: Mapping[str, Any], *, cpu: bool = False, **overrides: Any) -> TransformerConfig:
    """A megatron-core TransformerConfig from the Megatron YAML's ``model`` section."""
    activation, gated = ACTIVATIONS[model.get("activation", "gelu")]
    dtype = precision_dtype(model.get("params_dtype", "32"))
    recompute = model.get("activations_checkpoint_granularity")
    kwargs = dict(
        num_layers=model["num_layers"],
        hidden_size=model["hidden_size"],
        ffn_hidden_size=model.get("ffn_hidden_size", 4 * model["hidden_size"]),
        num_attention_heads=model["num_attention_heads"],
        num_query_groups=model.get("num_query_groups"),
        kv_channels=model.get("kv_channels"),
        tensor_model_parallel_size=model.get("tensor_model_parallel_size", 1),
        pipeline_model_parallel_size=model.get("pipeline_model_parallel_size", 1),
        sequence_parallel=model.get("sequence_parallel", False),
        normalization=model.get("normalization", "LayerNorm"),
        layernorm_epsilon=model.get("layernorm_epsilon", 1e-5),
        activation_func=activation,
        gated_linear_unit=gated,
        add_bias_linear=model.get("bias", True),
        hidden_dropout=model.get("hidden_dropout", 0.0),
        attention_dropout=model.get("attention_dropout", 0.0),
        init_method_std=model.get("init_method_std", 0.02),
        params_dtype=dtype,
        pipeline_dtype=dtype,
        bf16=dtype == torch.bfloat16,
        fp16=dtype == torch.float16,
        recompute_granularity=recompute,
        recompute_method=model.get("activations_checkpoint_method") if recompute == "full" else None,
        recompute_num_layers=model.get("activations_checkpoint_num_layers") if recompute == "full" else None,
        use_cpu_initialization=cpu,
        # TE's norms take zero-centred weights (NeMo's layernorm1p); the local spec gets w + 1
        layernorm_zero_centered_gamma=bool(model.get("layernorm_zero_centered_gamma")) and bool(model.get("transformer_engine")),
        fp8=model.get("fp8") if model.get("transformer_engine") else None,
        **{k: model[k] for k in FP8_KEYS if k in model and model.get("fp8") and model.get("transformer_engine")},
        **NO_FUSED_KERNELS,
    )
    kwargs.update(overrides)
    return TransformerConfig(**{k: v for k, v in kwargs.items() if v is not None or k.startswith("recompute")})


def build_gpt(
    model: Mapping[str, Any], vocab_size: int, *, make_heads: Optional[Callable] = None, cpu: bool = False,
    config: Optional[TransformerConfig] = None,
) -> HeadedGPTModel:
    """This rank's pipeline stage of the GPT (parallel state must be initialised). Transformer
    Engine's layer spec when the model section says ``transformer_engine`` (see
    :mod:`rlkit_nemo.model_keys`), megatron-core's local one otherwise; rotary embeddings with
    the section's ``rotary_base``, ``rotary_percent`` and ``rope_scaling`` (:mod:`rlkit_nemo.rope`)."""
    from rlkit_nemo.rope import apply_rope
    from rlkit_nemo.te import layer_spec

    config = config or transformer_config(model, cpu=cpu)
    gpt = HeadedGPTModel(
        config=config,
        transformer_layer_spec=layer_spec(config, use_te=bool(model.get("transformer_engine"))),
        vocab_size=vocab_size,
        max_sequence_length=model.get("max_position_embeddings", model["encoder_seq_length"]),
        pre_process=parallel_state.is_pipeline_first_stage(),
        post_process=parallel_state.is_pipeline_last_stage(),
        parallel_output=True,
        share_embeddings_and_output_weights=model.get("share_embeddings_and_output_weights", True),
        position_embedding_type=model.get("position_embedding_type", "learned_absolute"),
        rotary_base=model.get("rotary_base", 10000),
        rotary_percent=float(model.get("rotary_percent", 1.0)),
        make_heads=make_heads,
    )
    if not config.perform_initialization:
        mark_tensor_parallel(gpt)
    apply_rope(gpt, model)
    return gpt


def mark_tensor_parallel(model: torch.nn.Module) -> None:
    """Megatron's tensor-parallel attributes (``tensor_model_parallel``, ``partition_dim``) on
    the split weights of a model built with ``perform_initialization=False``: megatron-core
    sets them only while initialising, yet loading, gathering, gradient clipping and the
    optimizer read them. Embedding and column-parallel weights split along rows, row-parallel
    ones along columns; weights that have them already are left alone."""
    from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding
    from megatron.core.tensor_parallel.layers import set_tensor_model_parallel_attributes

    for module in model.modules():
        dim = 0 if isinstance(module, (VocabParallelEmbedding, ColumnParallelLinear)) else (
            1 if isinstance(module, RowParallelLinear) else None)
        weight = getattr(module, "weight", None)
        if dim is not None and isinstance(weight, torch.nn.Parameter) and not hasattr(weight, "tensor_model_parallel"):
            set_tensor_model_parallel_attributes(weight, True, dim, 1)
