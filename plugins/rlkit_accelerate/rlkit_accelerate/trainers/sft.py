"""``AccelerateSFTTrainer``: supervised fine-tuning on the output tokens of samples."""

from __future__ import annotations

from rlkit_accelerate.models import find_layout, freeze_trunk
from rlkit_accelerate.models.adapters import is_peft_model
from rlkit_accelerate.models.policy import check_unfrozen
from rlkit_accelerate.trainers.base import AccelerateRLTrainer
from rlkit_accelerate.trainers.common import load_base_model, prepare_offline_learning


class AccelerateSFTTrainer(AccelerateRLTrainer):
    method_name = "sft"

    def setup_model(self):
        model = load_base_model(self.config)
        if is_peft_model(model):
            return model  # peft froze everything but the adapters
        layout = find_layout(model)
        check_unfrozen("num_layers_unfrozen", self.config.model.num_layers_unfrozen, layout.num_blocks, allow_all=True)
        freeze_trunk(model, layout, self.config.model.num_layers_unfrozen)
        return model

    def make_experience(self, samples, seq_length: int = 2048) -> None:
        from rlkit_methods.sft.store import make_sft_experience

        self.store = make_sft_experience(samples, self.tokenizer, seq_length)

    def prepare_learning(self) -> None:
        prepare_offline_learning(self)

    def loss(self, batch):
        from rlkit_methods.sft.losses import sft_loss

        logits = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                            position_ids=batch["position_ids"], use_cache=False).logits
        loss = sft_loss(logits, batch["labels"])
        return loss, {"loss": loss.item()}
