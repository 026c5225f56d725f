"""``SFTTrainer``: supervised fine-tuning on the output tokens of samples, on any engine.

Causal: next-token cross-entropy on the output tokens. Seq2seq: the encoder reads the prompt
and the decoder learns the output + EOS. ``model.peft_config`` may also be prompt learning
here (the engine adds the virtual tokens)."""

from __future__ import annotations

from rlkit_core.engine import ModelSpec

from rlkit_methods.loop.offline import OfflineTrainer
from rlkit_methods.sft.losses import output_nll


class SFTTrainer(OfflineTrainer):
    method_name = "sft"
    forward_kind = "tokens"

    def model_spec(self) -> ModelSpec:
        return ModelSpec("lm", num_layers_unfrozen=self.config.model.num_layers_unfrozen, options={"prompt_learning": True})

    def make_experience(self, samples, seq_length: int = 2048) -> None:
        if self.engine.is_seq2seq:
            from rlkit_methods.data.seq2seq import make_seq2seq_sft_experience

            self.store = make_seq2seq_sft_experience(samples, self.tokenizer, seq_length)
        else:
            from rlkit_methods.sft.store import make_sft_experience

            self.store = make_sft_experience(samples, self.tokenizer, seq_length)

    def loss(self, outputs, batch):
        """L = -sum_t m_t log p(y_t) / sum_t m_t over the output tokens."""
        loss = output_nll(outputs["logprobs"], outputs["mask"])
        return loss, {"loss": loss.item()}
