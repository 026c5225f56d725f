"""The model a method asks for (:class:`rlkit_core.engine.ModelSpec`), built from the config:
the base LM of ``model.model_path`` (causal, or encoder-decoder for ``model_arch_type:
seq2seq``), with PEFT adapters, and the heads and reference of the spec."""

from __future__ import annotations

from rlkit_core.errors import ConfigError, RlkitError
from rlkit_accelerate import assets
from rlkit_accelerate.models.adapters import apply_peft, is_peft_model
from rlkit_accelerate.models.loading import load_lm, load_saved_heads


def load_base_model(config, *, prompt_learning: bool = False):
    """The LM named by ``model.model_path``: a folder, a model source such as
    ``smollm2-135m``, a transformers config or model, or (in YAML) a mapping with
    ``model_type`` and config fields for a model trained from scratch. ``model_extra_configs``
    go to the loader. ``prompt_learning`` admits peft's prompt-learning types (SFT only)."""
    path = config.model.model_path
    if isinstance(path, dict):
        from transformers import AutoConfig

        fields = dict(path)
        try:
            path = AutoConfig.for_model(fields.pop("model_type"), **fields)
        except (KeyError, ValueError) as exc:
            raise ConfigError(f"model.model_path: a mapping needs a known model_type and its config fields ({exc})") from None
    arch = config.model.model_arch_type
    # rlkit's own answer, always given: left unset, transformers asks on stdin (and a piped
    # `yes` would run the folder's code); a true value in model_extra_configs needs it true too
    extra = {**config.model.model_extra_configs, "trust_remote_code": config.model.trust_remote_code}
    model = load_lm(assets.resolve(path), arch, **extra)
    task_type = "SEQ_2_SEQ_LM" if arch == "seq2seq" else "CAUSAL_LM"
    return apply_peft(model, config.model.peft_config, task_type=task_type, prompt_learning=prompt_learning)


def is_seq2seq(config) -> bool:
    return config.model.model_arch_type == "seq2seq"


def build_model(config, spec):
    """The wrapper for ``spec.heads``: the plain LM (``lm``; with a ``reference``, the policy
    wrapper without a value head, whose hydra reference shares the frozen trunk), a policy with
    a value head and its exact reference (``value``), or an LM with ILQL heads (``ilql``)."""
    from rlkit_accelerate.models import CausalLMWithILQLHeads, CausalLMWithValueHead
    from rlkit_accelerate.models.seq2seq import Seq2SeqLMWithValueHead
    from rlkit_accelerate.models.seq2seq_ilql import Seq2SeqLMWithILQLHeads

    seq2seq = is_seq2seq(config)
    options = dict(spec.options)
    if spec.heads == "lm" and spec.reference:
        if seq2seq:
            raise ConfigError("model.model_arch_type: a reference for the plain LM is built for causal models; use causal")
        return CausalLMWithValueHead(load_base_model(config), num_layers_unfrozen=spec.num_layers_unfrozen, value_head=False)
    if spec.heads == "lm":
        return plain_lm(config, spec.num_layers_unfrozen, prompt_learning=options.get("prompt_learning", False))
    if spec.heads == "value":
        policy = Seq2SeqLMWithValueHead if seq2seq else CausalLMWithValueHead
        extra = {}
        if options.get("score_head"):  # a reward model: HF's score head, no reference
            if seq2seq:
                raise ConfigError("model.model_arch_type: a reward model's score head is built for causal models; use causal")
            extra = {"score_head": True, "with_reference": spec.reference}
        model = policy(load_base_model(config), num_layers_unfrozen=spec.num_layers_unfrozen,
                       num_value_layers_unfrozen=options.get("num_value_layers_unfrozen", 0), **extra)
        return with_saved_heads(model, model._heads(), config)
    q_heads = options.get("q_heads", "mlp")
    if seq2seq and q_heads != "mlp":
        raise ConfigError(f"method.q_heads: {q_heads!r} heads are for causal models; use mlp with model_arch_type seq2seq")
    extra = {} if seq2seq else {"q_heads": q_heads}
    heads = Seq2SeqLMWithILQLHeads if seq2seq else CausalLMWithILQLHeads
    model = heads(load_base_model(config), two_qs=options.get("two_qs", True), alpha=options.get("alpha", 0.99),
                  num_layers_unfrozen=spec.num_layers_unfrozen, **extra)
    return with_saved_heads(model, {"ilql_heads": model.ilql_heads}, config)


def with_saved_heads(model, heads, config):
    """``model`` with the heads an rlkit export saved beside the weights of ``model.model_path``
    (``value_head.safetensors``, ``ilql_heads.safetensors``), as trlX's ``from_pretrained``
    loads them: training goes on from an export with its learned heads, not fresh ones. A model
    source name (its cached folder holds no rlkit heads), a config or a model object: nothing to load."""
    try:
        load_saved_heads(config.model.model_path, heads, model.heads_file)
    except RlkitError as error:
        raise ConfigError(f"model.model_path: {error}; build the heads with the options they were saved with, "
                          f"or move {model.heads_file} out of the folder to start with fresh heads") from None
    return model


def plain_lm(config, num_layers_unfrozen: int, *, prompt_learning: bool):
    """The LM alone (SFT), its lower blocks frozen; peft (prompt learning included) when asked."""
    from rlkit_accelerate.models import find_layout, freeze_trunk
    from rlkit_accelerate.models.heads import check_unfrozen
    from rlkit_accelerate.models.seq2seq import find_seq2seq_layout

    model = load_base_model(config, prompt_learning=prompt_learning)
    if is_peft_model(model):
        return model  # peft froze everything but the adapters
    layout = find_seq2seq_layout(model) if is_seq2seq(config) else find_layout(model)
    check_unfrozen("num_layers_unfrozen", num_layers_unfrozen, layout.num_blocks, allow_all=True)
    freeze_trunk(model, layout, num_layers_unfrozen)
    return model

