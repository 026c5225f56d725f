"""Model wrappers for the accelerate trainers: pure transformers/torch modules.

- ``CausalLMWithValueHead``: PPO policy with value head/branch and an exact reference model.
- ``CausalLMWithILQLHeads``: ILQL heads (V, Q, target Q) and Q-guided generation.
- ``find_layout``: decoder blocks, final norm and LM head of any causal LM, found by structure.
- ``Seq2SeqLMWithValueHead`` / ``Seq2SeqLMWithILQLHeads``: the same for encoder-decoder (T5)
  models, over the decoder (``find_seq2seq_layout`` finds its pieces).
- ``load_causal_lm`` / ``load_seq2seq_lm``: a model from a folder, hub id, config or model.
- trlX's classes (``AutoModelForCausalLMWithHydraValueHead``, ...) and ``hf_get_*`` helpers,
  with trlX's API over the classes above (``trlx_ppo``, ``trlx_ilql``, ``hf_utils``). The
  classes are compatibility only: the engine never uses them, and they are imported the
  first time one is asked for.
"""

from rlkit_accelerate.models.blocks import (
    BranchInput,
    DecoderLayout,
    find_decoder_blocks,
    find_layout,
    position_ids_from_mask,
    run_blocks,
    run_post,
    run_trunk,
)
from rlkit_accelerate.models.hf_utils import (
    hf_get_decoder,
    hf_get_decoder_blocks,
    hf_get_decoder_final_norm,
    hf_get_hidden_size,
    hf_get_lm_head,
    hf_get_num_hidden_layers,
)
from rlkit_accelerate.models.heads import Branch, freeze_trunk, hydra_reference, make_head
from rlkit_accelerate.models.ilql_heads import CausalLMWithILQLHeads, ILQLHeads, ILQLOutput
from rlkit_accelerate.models.loading import load_causal_lm, load_heads, load_saved_heads, load_seq2seq_lm, save_heads
from rlkit_accelerate.models.policy import CausalLMWithValueHead, PolicyOutput
from rlkit_accelerate.models.seq2seq import Seq2SeqLayout, Seq2SeqLMWithValueHead, find_seq2seq_layout
from rlkit_accelerate.models.seq2seq_ilql import Seq2SeqLMWithILQLHeads

_TRLX = {
    "AutoModelForCausalLMWithHydraValueHead": "trlx_ppo",
    "AutoModelForCausalLMWithValueHead": "trlx_ppo",
    "AutoModelForSeq2SeqLMWithHydraValueHead": "trlx_ppo",
    "AutoModelForSeq2SeqLMWithValueHead": "trlx_ppo",
    "AutoModelForCausalLMWithILQLHeads": "trlx_ilql",
    "AutoModelForSeq2SeqLMWithILQLHeads": "trlx_ilql",
}

__all__ = [
    "AutoModelForCausalLMWithHydraValueHead",
    "AutoModelForCausalLMWithILQLHeads",
    "AutoModelForCausalLMWithValueHead",
    "AutoModelForSeq2SeqLMWithHydraValueHead",
    "AutoModelForSeq2SeqLMWithILQLHeads",
    "AutoModelForSeq2SeqLMWithValueHead",
    "Branch",
    "BranchInput",
    "CausalLMWithILQLHeads",
    "CausalLMWithValueHead",
    "DecoderLayout",
    "ILQLHeads",
    "ILQLOutput",
    "PolicyOutput",
    "Seq2SeqLMWithILQLHeads",
    "Seq2SeqLMWithValueHead",
    "Seq2SeqLayout",
    "find_decoder_blocks",
    "find_layout",
    "find_seq2seq_layout",
    "freeze_trunk",
    "hf_get_decoder",
    "hf_get_decoder_blocks",
    "hf_get_decoder_final_norm",
    "hf_get_hidden_size",
    "hf_get_lm_head",
    "hf_get_num_hidden_layers",
    "hydra_reference",
    "load_causal_lm",
    "load_heads",
    "load_saved_heads",
    "load_seq2seq_lm",
    "make_head",
    "position_ids_from_mask",
    "run_blocks",
    "run_post",
    "run_trunk",
    "save_heads",
]


def __getattr__(name: str):
    if name in _TRLX:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_TRLX[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
