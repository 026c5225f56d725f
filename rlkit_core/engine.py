"""The engine interface: what a method's trainer needs from a backend.

rlkit writes each method (PPO, ILQL, SFT, a plugin's GRPO...) once, in ``rlkit_methods``
or a plugin, and runs it on every engine (``rlkit_accelerate``, ``rlkit_nemo``, a plugin's).
The method owns the math, the data and the loop; the engine owns the hardware side. They
meet here. This module is a specification (no torch import): :class:`ModelSpec`, what a method
asks the engine to build, and :class:`Engine`, the protocol an engine implements. The
conformance kit :mod:`rlkit_core.testing.engine` checks an engine against it.

Conventions
-----------
* Shapes: ``B`` batch, ``Q`` prompt (query) tokens, left-padded, ``R`` response tokens,
  right-padded, ``T`` whole sequences, ``V`` vocabulary, ``A`` actions, ``S`` states.
* Tensors go in and come out on the CPU; the engine moves them to its devices.
* "Data-parallel" ranks hold different data; ranks inside one model replica (tensor or
  pipeline parallel) hold the same data and see the same results from every call.
* Every call is collective over all ranks unless it says otherwise: all ranks call it, in
  the same order.

Forward kinds
-------------
A method names what it wants computed; the engine computes it on whatever model layout it
has. Inputs are a batch object with the named attributes (or keys); outputs are a dict.

``"response"`` (policy methods: PPO, GRPO, RLOO)
    in:  ``query_tensors`` (B, Q), ``response_tensors`` (B, R), ``attention_mask`` (B, Q + R),
         optionally ``trunk`` (a list of per-row hidden states kept from the rollout).
    out: ``logprobs`` (B, R): log pi(response_t | query, response_<t);
         ``values`` (B, R) when the model has a value head: V of the state before each token;
         ``ref_logprobs`` (B, R) when asked for (``want``) and the model has a reference;
         ``trunk`` (list of B tensors) when asked for and the engine can keep it.
         ``want`` may also hold ``"no_logprobs"``, a hint: the method needs nothing of the
         policy's own from this call (only ``ref_logprobs`` or ``trunk``), so an engine may
         skip the policy's pass and leave ``logprobs`` and ``values`` out (GRPO when pi_old
         is the policy being trained). An engine that ignores it returns them as usual.
``"tokens"`` (SFT)
    in:  ``input_ids``, ``attention_mask``, ``labels`` (B, T) with -100 on positions that do
         not count (causal: labels equal the input ids; seq2seq: the decoder's targets).
    out: ``logprobs`` (B, L) of each counted label token and ``mask`` (B, L), 1 where it counts.
``"ilql"`` (ILQL)
    in:  ``input_ids``, ``attention_mask``, ``states_ixs`` (B, S), ``actions_ixs`` (B, A)
         (seq2seq: plus ``decoder_input_ids``, ``decoder_attention_mask``).
    out: ``action_logits`` (B, A, V) at the actions, ``qs`` and ``target_qs`` (tuples of
         (B, A, V)), ``vs`` (B, S, 1).
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence, runtime_checkable

import attrs

FORWARD_KINDS = ("response", "tokens", "ilql")


@attrs.frozen
class ModelSpec:
    """What a method asks the engine to build around the pretrained model.

    ``heads``: ``"lm"`` (the model alone), ``"value"`` (a value head: PPO) or ``"ilql"``
    (V, Q and target-Q heads). ``reference``: keep a frozen copy of the initial policy for
    ``ref_logprobs`` (hydra branch, adapters switched off, or a separate copy: the engine's
    choice, exact at step 0). ``num_layers_unfrozen``: train only the top blocks (-1: all).
    ``options``: head settings (``num_value_layers_unfrozen``, ``two_qs``, ``alpha``,
    ``prompt_learning``; ``score_head``: the value head is a reward model's bias-free linear
    ``score``, exported as an HF sequence classifier; ``disable_dropout``...) that an engine
    may refuse with a one-line error when it lacks them.
    """

    heads: str = attrs.field(validator=attrs.validators.in_(("lm", "value", "ilql")))
    reference: bool = False
    num_layers_unfrozen: int = -1
    options: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class QGuidance:
    """ILQL's steered sampling: pi(a|s) ∝ exp(top_k(log pi_b(a|s) + beta (min_i Q_i(s,a) - V(s))) / T),
    with ``logit_mask[prev, next]`` True forbidding ``next`` after ``prev``. The engine applies
    :func:`rlkit_methods.ilql.sampling.q_guided_logits` (or the same math) at every step."""

    beta: float = 1.0
    logit_mask: Any = None


@runtime_checkable
class Engine(Protocol):
    """A backend's engine. Constructed as ``Engine(config, **train.trainer_kwargs)``."""

    # --- facts (no collectives) ---------------------------------------------------------
    tokenizer: Any
    """The tokenizer of ``config.tokenizer`` (a pad token is set)."""
    config: Any
    """The resolved ``TRLConfig``."""

    @property
    def is_main_process(self) -> bool:
        """True on exactly one rank: the one that logs, scores and writes shared files."""

    @property
    def process_index(self) -> int:
        """This rank's data-parallel index (0 .. num_processes - 1)."""

    @property
    def num_processes(self) -> int:
        """The data-parallel size: how many different batches one step sees."""

    @property
    def writes_rank_state(self) -> bool:
        """True on exactly one rank per data-parallel index: the one that writes the loop's
        per-rank state file (ranks of one TP/PP replica share it)."""

    @property
    def is_seq2seq(self) -> bool:
        """Whether the model is an encoder-decoder (the data layout differs)."""

    def batch_sizes(self) -> tuple[int, int]:
        """(items per optimizer step on this rank, items per micro-batch)."""

    # --- the model ------------------------------------------------------------------------
    def build(self, spec: ModelSpec) -> None:
        """Load the model of ``config.model``, add what ``spec`` asks for, freeze, wrap for
        the parallel layout, and make the optimizer and scheduler of ``config``."""

    def generate(self, input_ids, attention_mask, *, guidance: QGuidance | None = None, **gen_kwargs) -> Any:
        """Sample continuations of left-padded prompts (B, Q) -> (B, Q + N) ids: the prompts
        then new tokens, pad after EOS. Eval mode (no dropout), whole weights; ranks may
        generate different lengths. ``gen_kwargs`` are HF ``generate``'s (``max_new_tokens``,
        ``do_sample``, ``top_k``, ``top_p``, ``temperature``, ``eos_token_id``...);
        ``guidance`` steers a model with ILQL heads. The loop samples through a generator
        (:mod:`rlkit_core.generator`); this is what the engine's default generator runs."""

    def forward(self, kind: str, batch: Any, want: Sequence[str] = ()) -> dict[str, Any]:
        """A forward pass without gradients in eval mode (see "Forward kinds"); ``want``
        names optional outputs (``ref_logprobs``, ``trunk``). Outputs are on the CPU."""

    def step(self, kind: str, items: Sequence[Any], collate: Callable[[Sequence[Any]], Any],
             loss: Callable[[dict[str, Any], Any], tuple[Any, dict[str, float]]]) -> dict[str, float]:
        """One optimizer step over this rank's ``items``: the engine splits them into
        micro-batches of ``batch_sizes()[1]`` items in order (the last may be short), calls
        ``collate`` on each micro-batch's items on its own, runs the ``kind`` forward in train
        mode, calls ``loss(outputs, micro_batch) -> (scalar loss, stats)``, accumulates
        gradients, clips (``train.max_grad_norm``), steps the optimizer and the scheduler.
        Returns the stats averaged over micro-batches and data-parallel ranks, plus
        ``policy/grad_norm``, ``learning_rate_group_<i>``, ``time/forward`` and
        ``time/backward`` (and may add ``cpu/step``: the step's process CPU seconds).

        Micro-batches are of items, collated separately: an item the method collates into
        several rows (a DPO or reward-model pair: its chosen and rejected rows) is never cut
        between micro-batches, whatever the micro-batch size, and each micro-batch is padded
        to its own longest row. An engine whose schedule needs one shape for every
        micro-batch of a step (pipeline parallelism) pads them to the step's longest and
        widest itself and hands ``loss`` the outputs of the micro-batch's own rows and
        length. With ``train.packing`` an engine that supports it runs a micro-batch's rows
        as one packed sequence (each row's own positions, attention never across rows) and
        hands ``loss`` the outputs in the padded layout, equal up to float error; one that
        does not refuses the key in one line.

        Weighting, by items: micro-batch ``k`` with ``n_k`` of the step's ``N`` items counts
        ``n_k / N`` in the gradient (its loss times ``n_k / N``) and in every stat (rows for
        every method but the pair methods, whose loss is a mean over pairs); data-parallel
        ranks count equally (gradients averaged), which is by items too since the loop gives
        every rank the same number of items per step. Items, not tokens: each method's loss
        already normalises over the tokens it counts (a masked token mean, or GRPO's loss
        types with their own global token count), which only the method knows; items need
        nothing from the method, give a loss that is a mean over items the same value however
        a step is split, and are what gradient accumulation does in TRL and trlX. ``collate``
        and ``loss`` are per-micro-batch work: they run once per micro-batch and must not
        call a collective (ranks may run different numbers of micro-batches); anything
        computed over a whole step or rollout phase is done before ``step``."""

    def sync_target(self, alpha: float) -> None:
        """ILQL: target Q heads <- alpha * Q heads + (1 - alpha) * target Q heads."""

    # --- collectives -----------------------------------------------------------------------
    def gather_object(self, obj: Any) -> list[Any]:
        """Every data-parallel rank's ``obj``, in rank order, on every rank."""

    def broadcast_object(self, obj: Any) -> Any:
        """The main process's ``obj`` on every rank."""

    def all_reduce_sum(self, tensor) -> Any:
        """The sum of a CPU tensor over the data-parallel ranks, on every rank (a new tensor)."""

    def barrier(self) -> None:
        """Wait for every rank."""

    # --- state -----------------------------------------------------------------------------
    def save_state(self, directory) -> None:
        """Write the weights, optimizer and scheduler into ``directory`` (sharded where the
        engine shards; every rank writes its part). The folder exists; the loop renames it."""

    def load_state(self, directory) -> None:
        """Restore what ``save_state`` wrote; a mismatch is a one-line error."""

    def export(self, directory, *, merge_adapters: bool = False) -> None:
        """A plain HF model folder (and the tokenizer) that transformers loads; heads beside it."""


def check_forward_kind(kind: str) -> None:
    if kind not in FORWARD_KINDS:
        raise ValueError(f"forward kind {kind!r}: expected one of {', '.join(FORWARD_KINDS)}")
