"""Padding-free training forwards (``train.packing``): a micro-batch's rows packed into bins.

The real tokens of the B padded rows are laid end to end in K bins of width W (first-fit,
longest rows first: [K, W]), with position ids that restart at 0 on every row, and the model
is called without an attention mask. transformers (``masking_utils.find_packed_sequence_indices``)
reads the rows back from those position ids and gives SDPA and eager attention a
block-diagonal causal mask, so no token attends across rows; flash-attention's varlen kernels
take the same boundaries on a GPU. The end of a bin that no row fills holds token 0 numbered as
a row of its own, after every real token of the bin, so causal attention shows it to none of
them. W is the longest row's length or a multiple of it, whichever costs least by an estimate
of the model's work (:func:`bin_width`): SDPA and eager attention compute the whole W x W mask,
so one sequence of all N real tokens costs N^2 per head (on the randomwalks batches, 100 rows
of 11, that ran at half the padded speed: bench/packing.py), while bins of the longest row
cannot pair rows near the longest. A model whose attention ignores the position ids is refused
at build (:func:`check_packing` packs two copies of one row and compares them).

Rows layout (the ``"tokens"`` kind: SFT, RFT): where the model runs rlkit's row attention
(:mod:`rlkit_accelerate.row_attention`, probed at build like the bins) and it costs less by the
same estimate, the rows lie end to end in one sequence with no unused position and each layer
attends causally within each row, with no mask built: R Lmax^2 / 2 query-key pairs (the CPU
kernel skips the blocks above the diagonal) against the bins' K W^2 and their unused ends.

The method's collate and loss stay as they are: each forward kind reads only the packed
positions its outputs need (HF's ``logits_to_keep``: the LM head runs there alone) and
scatters them back into the padded layout, with zeros where the padded path holds values no
loss counts (pad tokens, pad states).
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from rlkit_core.errors import ConfigError
from rlkit_accelerate.row_attention import RowLayout, running_rows
from rlkit_methods.engine_kit import IGNORE_INDEX, logprobs_of_labels

PROBE_TOKENS = 6
WIDER_ONLY_BELOW = 0.95  # of the cost of bins of the longest row
# the row attention's gathers (queries, keys, values into rows and the outputs back, forward and
# backward: a few H values moved per token) cost like this many query-key pairs a token; fit on
# the randomwalks (H = 144: rows ran 2.4% slower than bins of 11, estimated 3-5% cheaper without it)
ROW_GATHERS = 64


def _get(batch: Any, key: str, default: Any = None) -> Any:
    return batch.get(key, default) if isinstance(batch, dict) else getattr(batch, key, default)


@dataclass
class PackedRows:
    """Where each token of a padded (B, T) batch sits among the K x L packed positions."""

    real: torch.Tensor  # (B, T) bool
    index: torch.Tensor  # (B, T) flat packed position (a pad: its row's first or last real token's)
    position_ids: torch.Tensor  # (K, L), 0 at each row's first token
    rows: RowLayout | None = None  # the rows layout (K = 1, no unused position): attention row by row

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.position_ids.shape)

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, ...) -> (K, L, ...): each row's real positions, zeros where no row is."""
        out = x.new_zeros((self.position_ids.numel(), *x.shape[2:]))
        out[self.index[self.real]] = x[self.real]
        return out.view(*self.shape, *x.shape[2:])

    def keep(self, at: torch.Tensor) -> torch.Tensor:
        """(K, L) bool: the packed positions of the padded positions ``at`` (B, T) bool."""
        keep = torch.zeros(self.position_ids.numel(), dtype=torch.bool, device=at.device)
        keep[self.index[at]] = True
        return keep.view(self.shape)

    def unpack(self, x: torch.Tensor, at: torch.Tensor | None = None) -> torch.Tensor:
        """(K, L, ...) packed values -> (B, T, ...) at ``at`` (B, T) bool (default: the real
        positions), zeros elsewhere."""
        at = self.real if at is None else at
        return self._scatter(x.reshape(-1, *x.shape[2:])[self.index[at]], at)

    def unkeep(self, x: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
        """(M, ...) values at ``self.keep(at)`` (in its order) -> (B, T, ...), zeros off ``at``."""
        rank = self.keep(at).flatten().long().cumsum(0) - 1  # flat position -> its place among the kept
        return self._scatter(x[rank[self.index[at]]], at)

    def _scatter(self, values: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
        out = values.new_zeros((*at.shape, *values.shape[1:]))
        out[at] = values
        return out

    def columns(self, ixs: torch.Tensor) -> torch.Tensor:
        """(B, K') padded columns -> (B, K') flat packed positions."""
        return self.index.gather(1, ixs)


def first_fit(lengths: list[int], width: int) -> tuple[list[int], list[int]]:
    """Rows into bins of ``width``, longest first, each into the first bin with room: each
    row's flat offset, and the room left in each bin."""
    room: list[int] = []
    offsets = [0] * len(lengths)
    for b in sorted(range(len(lengths)), key=lambda b: -lengths[b]):
        k = next((k for k, r in enumerate(room) if r >= lengths[b]), len(room))
        if k == len(room):
            room.append(width)
        offsets[b] = k * width + width - room[k]
        room[k] -= lengths[b]
    return offsets, room


def bin_width(lengths: list[int], attention_cost: float | None) -> int:
    """The bins' width: the longest row's, or (given ``attention_cost``, the cost of one
    query-key pair against one token's other work, about 1 / (6 hidden size)) the width of least
    estimated cost K (W + attention_cost W^2) among the longest row's times 2^i and one bin of all
    rows, where it is clearly below the longest row's: wider bins waste less at their ends but
    SDPA computes their whole W x W mask."""
    longest, total = max(max(lengths, default=1), 1), max(sum(lengths), 1)
    if attention_cost is None or total <= longest:
        return longest
    candidates = {longest: len(first_fit(lengths, longest)[1])}
    width = 2 * longest
    while width < total:
        candidates[width] = -(-total // width)  # rows of at most half a bin leave little room unused
        width *= 2
    candidates[total] = 1
    cost = {w: k * (w + attention_cost * w * w) for w, k in candidates.items()}
    best = min(cost, key=cost.get)
    # wider only for a clear saving: a masked attention costs more than its flops say (measured:
    # bins of 22 ran the walks slower than bins of 11, estimated 3% cheaper)
    return best if cost[best] < WIDER_ONLY_BELOW * cost[longest] else longest


def rows_pay(lengths: list[int], width: int, bins: int, attention_cost: float) -> bool:
    """Whether rows end to end, attended row by row (N (1 + g c) + c R Lmax^2 / 2: every row
    padded to the longest inside attention, causal, and the gathers into rows and back), cost
    less than ``bins`` bins of ``width`` (K (W + c W^2): SDPA computes the whole masked W x W)."""
    rows = sum(n > 0 for n in lengths)
    cost = sum(lengths) * (1 + ROW_GATHERS * attention_cost) + attention_cost * rows * max(lengths) ** 2 / 2
    return cost < bins * (width + attention_cost * width**2)


def pack_rows(attention_mask: torch.Tensor, attention_cost: float | None = None, rows: bool = False) -> PackedRows:
    """Rows in bins (:func:`bin_width`) filled first-fit with the longest rows first; with
    ``rows`` (the model runs row attention) and an ``attention_cost``, the rows layout where it
    costs less (:func:`rows_pay`)."""
    real = attention_mask.bool()  # (B, T)
    lengths = real.sum(-1).tolist()
    width = bin_width(lengths, attention_cost)
    offsets, room = first_fit(lengths, width)
    layout = None
    if rows and attention_cost is not None and max(lengths) > 0 and rows_pay(lengths, width, len(room), attention_cost):
        width = sum(lengths)
        offsets, room = [sum(lengths[:b]) for b in range(len(lengths))], [0]
        layout = RowLayout.of(offsets, lengths, real.device)
    within = real.long().cumsum(-1) - 1  # (B, T) each real token's position in its row
    index = torch.tensor(offsets, device=real.device).unsqueeze(1) + within.clamp(min=0)  # (B, T)
    index = index.clamp(max=len(room) * width - 1)  # a row of padding alone points at a real place too
    # a bin's unused end numbered as a row of its own (0, 1, ...): it starts a new block
    columns = torch.arange(width, device=real.device)
    used = torch.tensor([width - r for r in room], device=real.device).unsqueeze(1)  # (K, 1)
    position_ids = (columns - used).where(columns >= used, columns).flatten()  # (K W,)
    position_ids[index[real]] = within[real]
    return PackedRows(real, index, position_ids.view(len(room), width), layout)


def running(rows_lm: torch.nn.Module | None, p: PackedRows):
    """The forward's context: ``rows_lm`` attending row by row where ``p`` is the rows layout."""
    return running_rows(rows_lm, p.rows) if p.rows is not None else nullcontext()


def attention_cost(model: torch.nn.Module) -> float:
    """One query-key pair's cost against one token's other work in ``model``'s blocks: 4 H
    flops per pair (scores and values) over about 24 H^2 per token (projections and MLP)."""
    return 1.0 / (6 * packing_lm(model).get_output_embeddings().weight.shape[-1])


def packing_lm(model: torch.nn.Module) -> torch.nn.Module:
    """The HF causal LM under rlkit's head wrappers (which keep it as ``base_model``)."""
    return model.base_model if hasattr(model, "heads_file") else model


@contextmanager
def _evaluating(lm: torch.nn.Module):
    was_training = [(m, m.training) for m in lm.modules()]
    lm.eval()
    try:
        yield
    finally:
        for m, flag in was_training:
            m.training = flag


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.allclose(a, b, atol=1e-3 * (1 + a.abs().max().item()))


@torch.no_grad()
def check_packing(model: torch.nn.Module, *, seq2seq: bool, virtual_tokens: int) -> bool:
    """Refuse ``train.packing`` where it cannot hold: seq2seq models, prompt learning (peft
    numbers positions from its virtual tokens and drops position ids), and models whose
    attention does not keep packed rows apart (two copies of one row, packed, must give the
    same logits; a model attending across rows gives the second copy other ones). Returns
    whether the model also runs row attention right (:func:`row_attention_holds`)."""
    if seq2seq:
        raise ConfigError("train.packing: packs causal LMs' rows; a seq2seq model trains padded; set train.packing: false")
    if virtual_tokens:
        raise ConfigError("train.packing: peft prompt learning puts virtual tokens before every row and drops position "
                          "ids, so rows cannot be packed; set train.packing: false")
    lm = packing_lm(model)
    vocab = lm.get_input_embeddings().weight.shape[0]
    device = next(lm.parameters()).device
    P = PROBE_TOKENS
    row, positions = torch.arange(3, 3 + P, device=device) % vocab, torch.arange(P, device=device)
    # two bins of 2P: the row twice; the row and an unused end (token 0, numbered as a row of its own)
    ids = torch.stack([torch.cat([row, row]), torch.cat([row, torch.zeros_like(row)])])  # (2, 2P)
    position_ids = torch.cat([positions, positions]).expand(2, -1)
    keep = torch.ones(2, 2 * P, dtype=torch.bool, device=device)
    name = type(lm).__name__
    try:
        with _evaluating(lm):
            logits = lm(input_ids=ids, position_ids=position_ids, use_cache=False, logits_to_keep=keep).logits.float()
    except TypeError as exc:
        raise ConfigError(f"train.packing: {name} does not take position_ids and logits_to_keep ({exc}); "
                          f"set train.packing: false") from None
    logits = logits.view(4, P, -1)  # the kept positions in order: the four P-token runs
    first = logits[0]
    if not all(_close(first, other) for other in logits[1:3]):
        attn = getattr(getattr(lm, "config", None), "_attn_implementation", None)
        raise ConfigError(f"train.packing: {name} (attention {attn}) lets packed rows attend to each other "
                          f"(its attention does not read rows from position ids); set train.packing: false")
    return row_attention_holds(lm, row, first)


@torch.no_grad()
def row_attention_holds(lm: torch.nn.Module, row: torch.Tensor, alone: torch.Tensor) -> bool:
    """Whether ``lm`` under row attention gives rows of 6, 4 and 6 tokens of ``row``, end to end,
    the logits ``alone`` (P, V) of the row by itself: no row sees another, each is causal. A model
    whose attention does not go through transformers' attention interface fails (it would run
    without any mask) and trains in bins."""
    if getattr(lm, "is_activation_checkpointing", False):  # a recomputed layer would run outside running_rows
        return False
    lengths = [len(row), len(row) - 2, len(row)]
    ids = torch.cat([row[:n] for n in lengths]).unsqueeze(0)  # (1, N)
    position_ids = torch.cat([torch.arange(n, device=row.device) for n in lengths]).unsqueeze(0)
    layout = RowLayout.of([0, lengths[0], lengths[0] + lengths[1]], lengths, row.device)
    try:
        with _evaluating(lm), running_rows(lm, layout):
            logits = lm(input_ids=ids, position_ids=position_ids, use_cache=False).logits.float()[0]  # (N, V)
    except Exception:  # noqa: BLE001 - any model that cannot run it trains in bins
        return False
    return _close(torch.cat([alone[:n] for n in lengths]), logits)


def packed_tokens_forward(model, batch, attention_cost: float | None = None, rows_lm=None) -> dict[str, Any]:
    """The ``"tokens"`` kind packed: log p of each counted label (B, T - 1) and its mask; the LM
    head runs only at the positions whose next label counts. ``rows_lm``: the HF model under
    ``model`` that runs row attention (None: bins only)."""
    labels = batch["labels"]  # (B, T)
    p = pack_rows(batch["attention_mask"], attention_cost, rows=rows_lm is not None)
    next_labels = F.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX)  # (B, T): the label position t predicts
    counted = p.real & (next_labels != IGNORE_INDEX)  # (B, T)
    keep = p.keep(counted)  # (K, L)
    with running(rows_lm, p):
        logits = model(input_ids=p.pack(batch["input_ids"]), position_ids=p.position_ids, use_cache=False,
                       logits_to_keep=keep).logits  # (M, V)
    nll = F.cross_entropy(logits.float(), p.pack(next_labels)[keep], reduction="none")  # (M,)
    return {"logprobs": p.unkeep(-nll, counted)[:, :-1], "mask": counted[:, :-1].float()}  # (B, T - 1)


def packed_response_forward(model, unwrapped, batch, attention_cost: float | None = None) -> dict[str, Any]:
    """The ``"response"`` kind packed: log-probs (and values, with a value head) (B, R) of each
    response token, read at the real positions before them (column Q - 1 + j predicts response
    token j); with a kept ``trunk``, its real rows stand in for the frozen trunk."""
    query, response, mask = _get(batch, "query_tensors"), _get(batch, "response_tensors"), _get(batch, "attention_mask")
    Q, R = query.shape[1], response.shape[1]
    ids = torch.cat([query, response], dim=1)  # (B, T = Q + R)
    p = pack_rows(mask, attention_cost)
    states = torch.zeros_like(p.real)
    states[:, Q - 1 : Q + R - 1] = p.real[:, Q - 1 : Q + R - 1]  # (B, T): the real positions before a response token
    keep = p.keep(states)  # (K, L)
    inputs = {"input_ids": p.pack(ids), "position_ids": p.position_ids}
    if hasattr(unwrapped, "score_rollout"):  # rlkit's policy: heads on the LM's last hidden state
        trunk = _get(batch, "trunk")
        if trunk is not None:
            inputs["trunk_hidden"] = p.pack(trunk)
        out = model(**inputs, keep=keep)
        logits, values = out.logits, out.values  # (M, V), (M,) or None
    else:
        logits, values = model(**inputs, use_cache=False, logits_to_keep=keep).logits, None
    result = {}
    if logits is not None:  # None for a reward model: its score head alone
        next_ids = p.pack(F.pad(ids[:, 1:], (0, 1)))[keep]  # (M,) the token each kept position predicts
        result["logprobs"] = p.unkeep(logprobs_of_labels(logits, next_ids), states)[:, Q - 1 : Q + R - 1]
    if values is not None:
        result["values"] = p.unkeep(values.float(), states)[:, Q - 1 : Q + R - 1]
    return result


def packed_ilql_forward(model, batch, attention_cost: float | None = None) -> dict[str, Any]:
    """The ``"ilql"`` kind packed: the heads read the states and actions at their flat packed
    positions, and the outputs come back as (B, A, V), (B, S, 1)."""
    p = pack_rows(_get(batch, "attention_mask"), attention_cost)
    states_ixs, actions_ixs = p.columns(_get(batch, "states_ixs")), p.columns(_get(batch, "actions_ixs"))  # (B, S), (B, A)
    B, S = states_ixs.shape
    A = actions_ixs.shape[1]
    out = model(input_ids=p.pack(_get(batch, "input_ids")), position_ids=p.position_ids,
                states_ixs=states_ixs.view(1, -1), actions_ixs=actions_ixs.view(1, -1), flat_ixs=True)
    return {"action_logits": out.logits.flatten(0, 1)[actions_ixs],  # (B, A, V)
            "qs": tuple(q.view(B, A, -1) for q in out.qs), "target_qs": tuple(q.view(B, A, -1) for q in out.target_qs),
            "vs": out.vs.view(B, S, -1)}
