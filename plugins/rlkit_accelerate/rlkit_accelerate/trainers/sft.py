"""``AccelerateSFTTrainer``: supervised fine-tuning on the output tokens of samples.

Causal: next-token cross-entropy on the output tokens. Seq2seq: the encoder reads the prompt
and the decoder learns the output + EOS (labels; the model shifts them right itself).

``model.peft_config`` may also be prompt learning here (PROMPT_TUNING, P_TUNING,
PREFIX_TUNING): peft's forward adds the virtual tokens or prefixes, so the loss only has to
line its logits up with the labels."""

from __future__ import annotations

import attrs
import torch
import torch.nn.functional as F

from rlkit_methods.sft.store import IGNORE_INDEX

from rlkit_accelerate.models import find_layout, freeze_trunk
from rlkit_accelerate.models.adapters import apply_peft, is_peft_model, virtual_tokens
from rlkit_accelerate.models.policy import check_unfrozen
from rlkit_accelerate.models.seq2seq import find_seq2seq_layout
from rlkit_accelerate.trainers.base import AccelerateRLTrainer
from rlkit_accelerate.trainers.common import is_seq2seq, load_base_model, prepare_offline_learning


class AccelerateSFTTrainer(AccelerateRLTrainer):
    method_name = "sft"

    def setup_model(self):
        # load_base_model refuses prompt learning (PPO's and ILQL's heads); SFT applies peft itself
        model_config = self.config.model
        model = load_base_model(attrs.evolve(self.config, model=attrs.evolve(model_config, peft_config=None)))
        task_type = "SEQ_2_SEQ_LM" if is_seq2seq(self.config) else "CAUSAL_LM"
        model = apply_peft(model, model_config.peft_config, task_type, prompt_learning=True)
        self.virtual_tokens = virtual_tokens(model)
        if is_peft_model(model):
            return model  # peft froze everything but the adapters
        layout = find_seq2seq_layout(model) if is_seq2seq(self.config) else find_layout(model)
        check_unfrozen("num_layers_unfrozen", self.config.model.num_layers_unfrozen, layout.num_blocks, allow_all=True)
        freeze_trunk(model, layout, self.config.model.num_layers_unfrozen)
        return model

    def generate(self, input_ids, attention_mask=None, **kwargs):
        out = super().generate(input_ids, attention_mask, **kwargs)
        if not is_seq2seq(self.config):
            return out
        # the decoder's output starts with its start token: prompt + new tokens, as for causal LMs
        return torch.cat([input_ids.to(out.device), out[:, 1:]], dim=1)

    def make_experience(self, samples, seq_length: int = 2048) -> None:
        if is_seq2seq(self.config):
            from rlkit_accelerate.seq2seq_data import make_seq2seq_sft_experience

            self.store = make_seq2seq_sft_experience(samples, self.tokenizer, seq_length)
        else:
            from rlkit_methods.sft.store import make_sft_experience

            self.store = make_sft_experience(samples, self.tokenizer, seq_length)

    def prepare_learning(self) -> None:
        prepare_offline_learning(self)

    def loss(self, batch):
        if is_seq2seq(self.config):
            labels = batch["labels"]  # (B, R), IGNORE_INDEX on padding
            # the decoder reads [start] + labels[:-1] (passing labels would make the model compute a second loss)
            decoder_input_ids = self.unwrapped_model.prepare_decoder_input_ids_from_labels(labels=labels)
            logits = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                decoder_input_ids=decoder_input_ids, use_cache=False).logits  # (B, R, V): t predicts labels[t]
            loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE_INDEX)
            return loss, {"loss": loss.item()}
        from rlkit_methods.sft.losses import sft_loss

        if self.virtual_tokens:
            # peft numbers positions from its first virtual token and drops position ids, so
            # the real tokens must open each row; its logits cover virtual + real positions
            batch = real_tokens_first(batch)
            logits = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False).logits
            logits = logits[:, self.virtual_tokens:]  # (B, T, V) over the real tokens
        else:
            logits = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                position_ids=batch["position_ids"], use_cache=False).logits
        loss = sft_loss(logits, batch["labels"])
        return loss, {"loss": loss.item()}


def real_tokens_first(batch):
    """A left-padded batch with its padding moved to the right (rows rolled left); a
    right-padded batch unchanged."""
    mask = batch["attention_mask"]  # (B, T), the real tokens contiguous
    lead = (mask.cumsum(-1) == 0).sum(-1, keepdim=True)  # (B, 1) leading pads
    index = (torch.arange(mask.shape[1], device=mask.device) + lead) % mask.shape[1]  # (B, T)
    return {k: batch[k].gather(1, index) for k in ("input_ids", "attention_mask", "labels")}
