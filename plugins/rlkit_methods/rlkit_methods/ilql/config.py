"""``ILQLConfig``: trlX's ILQL method section, with ranges checked (torch-free module)."""

from __future__ import annotations

from typing import Any

import attrs

from rlkit_core.config import MethodConfig, TRLConfig, in_closed_interval, in_open_interval, non_negative, one_of, positive

from rlkit_methods.common.defaults import number as _number
from rlkit_methods.common.defaults import trlx_default_config


@attrs.define
class ILQLConfig(MethodConfig):
    """Implicit language Q-learning (trlX's fields and meanings).

    :param tau: expectile of the value loss, in (0, 1)
    :param gamma: discount
    :param cql_scale: weight of the CQL term; :param awac_scale: weight of the AWAC term
    :param alpha: Polyak rate of the target-Q sync, in (0, 1]
    :param beta: AWAC temperature in the loss (generation uses ``gen_kwargs.beta``)
    :param steps_for_target_q_sync: optimizer steps between target syncs
    :param two_qs: two Q heads, the min of the target heads is used
    :param gen_kwargs: generation kwargs (``beta``, ``top_k``, ``temperature``, ...)
    :param q_heads: rlkit's option. ``mlp`` (default): trlX's Q heads, an MLP ``h -> 2h -> |V|``
        each (trlX checkpoints and figures match). ``embedding``: an MLP ``h -> 2h -> h`` read out
        through the model's own output embedding (detached), plus a per-state offset and a
        per-token bias, whose size does not grow with the vocabulary (1.4 M parameters per head
        for SmolLM2-135M against 57 M); untrained, it leaves sampling to the behaviour policy.
    """

    name: str = "ILQLConfig"
    tau: float = attrs.field(default=0.7, validator=_number(in_open_interval(0, 1)))
    gamma: float = attrs.field(default=0.99, validator=_number(in_closed_interval(0, 1)))
    cql_scale: float = attrs.field(default=0.1, validator=_number(non_negative))
    awac_scale: float = attrs.field(default=1.0, validator=_number(non_negative))
    alpha: float = attrs.field(default=0.001, validator=_number(positive, in_closed_interval(0, 1)))
    beta: float = attrs.field(default=0.0, validator=_number(non_negative))
    steps_for_target_q_sync: int = attrs.field(default=5, validator=positive)
    two_qs: bool = True
    gen_kwargs: dict[str, Any] = attrs.field(
        factory=lambda: dict(max_new_tokens=56, top_k=20, beta=1, temperature=1.0)
    )
    q_heads: str = attrs.field(default="mlp", validator=one_of("mlp", "embedding"))

    def loss(self, outputs, labels):
        """trlX's contract: ``outputs = (logits, (qs, target_qs, vs))`` with ``logits`` over the
        whole sequence (B, T, V), ``qs``/``target_qs`` at the actions, ``vs`` at the states;
        ``labels`` an ILQL batch (``input_ids``, ``actions_ixs``, ``rewards``, ``dones``, or
        ``decoder_input_ids`` for seq2seq). Returns ``(loss, stats)``."""
        from rlkit_methods.ilql.losses import batched_index_select, ilql_loss

        logits, (qs, target_qs, vs) = outputs
        decoder_input_ids = getattr(labels, "decoder_input_ids", None)
        if decoder_input_ids is not None:
            actions = decoder_input_ids[:, 1:]  # (B, A)
            action_logits = logits[:, :-1] if logits.shape[1] == actions.shape[1] + 1 else logits
        else:
            # the action at state index i is the token right after it
            actions = labels.input_ids[:, 1:].gather(dim=1, index=labels.actions_ixs)  # (B, A)
            action_logits = batched_index_select(logits, labels.actions_ixs, dim=1)  # (B, A, V)
        return ilql_loss(
            action_logits, qs, target_qs, vs, actions, labels.rewards.to(vs.dtype), labels.dones,
            gamma=self.gamma, tau=self.tau, cql_scale=self.cql_scale, awac_scale=self.awac_scale, beta=self.beta,
        )

    def should_sync_target(self, optimizer_step: int) -> bool:
        """Whether to sync the target Q heads after this optimizer step."""
        return optimizer_step > 0 and optimizer_step % self.steps_for_target_q_sync == 0


def default_ilql_config() -> TRLConfig:
    """trlX's ``default_ilql_config`` (model: the offline SmolLM2-135M source)."""
    return trlx_default_config(
        ILQLConfig(
            name="ilqlconfig", tau=0.7, gamma=0.99, cql_scale=0.1, awac_scale=1.0, alpha=0.001, beta=0.0,
            steps_for_target_q_sync=5, two_qs=True,
            gen_kwargs=dict(max_new_tokens=56, top_k=20, beta=1, temperature=1.0),
        ),
        trainer="AccelerateILQLTrainer", seq_length=64, batch_size=128, total_steps=1000,
        checkpoint_interval=1000, lr=5.0e-5,
    )
