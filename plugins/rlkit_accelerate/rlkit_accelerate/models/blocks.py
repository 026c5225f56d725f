"""Find a causal LM's decoder blocks, final norm and LM head by structure, and run them in pieces.

No per-architecture class list: the blocks are the largest ``nn.ModuleList`` of same-class
children, the LM head is ``get_output_embeddings()``, and what runs between the last block and
the head (the final norm, OPT's ``project_out``) is found by tracing one tiny forward pass.

Blocks are called with exactly what the model itself passes them (causal mask, rotary
``position_embeddings``, ``position_ids``, ...): a forward pre-hook on the first block above the
branch point captures those arguments and stops the forward there. That is how the frozen trunk
runs once and the trainable top, the value branch and the hydra reference reuse its output.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import torch
from torch import nn

from rlkit_core.errors import RlkitError
from rlkit_methods.engine_kit import position_ids_from_mask

__all__ = [
    "BranchInput",
    "DecoderLayout",
    "capture_block_input",
    "capture_head_input",
    "eval_mode",
    "find_decoder_blocks",
    "find_layout",
    "position_ids_from_mask",  # re-exported: positions follow the real tokens under left padding
    "run_blocks",
    "run_post",
    "run_trunk",
]


@dataclass
class DecoderLayout:
    """Where the pieces of a causal LM are. Holds references to the model's own modules."""

    blocks: nn.ModuleList  # the repeated transformer layers, bottom to top
    blocks_name: str  # qualified name, e.g. "transformer.h" or "model.layers"
    post: list[nn.Module]  # run in order between the last block and the head (final norm, ...)
    post_names: list[str]
    lm_head: nn.Module

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def hidden_size(self) -> int:
        """Width of the LM head's input, which is what value/Q heads read."""
        return self.lm_head.weight.shape[-1]


@dataclass
class BranchInput:
    """The trunk's output at a branch point: the hidden state entering block ``index`` and the
    other arguments the model passes every block (identical for all blocks of one forward)."""

    hidden: torch.Tensor  # [B, T, H]
    index: int  # number of blocks already applied
    args: tuple = ()  # positional arguments after hidden_states
    kwargs: dict[str, Any] = field(default_factory=dict)


class _StopForward(Exception):
    """Raised from a pre-hook to end a forward pass once the branch input is captured."""


def find_decoder_blocks(model: nn.Module) -> tuple[str, nn.ModuleList]:
    """The ModuleList of same-class children holding the most parameters."""
    best: tuple[int, str, nn.ModuleList] | None = None
    for name, module in model.named_modules():
        if not isinstance(module, nn.ModuleList) or len(module) == 0:
            continue
        if len({type(child) for child in module}) != 1:
            continue
        size = sum(p.numel() for p in module.parameters())
        if best is None or size > best[0]:
            best = (size, name, module)
    if best is None:
        raise RlkitError(f"{type(model).__name__}: no list of repeated decoder blocks found")
    return best[1], best[2]


def _ancestors(model: nn.Module, name: str) -> list[tuple[str, nn.Module]]:
    """(prefix, module) for the root and every module on the path to ``name``'s parent."""
    parts = name.split(".")
    return [(".".join(parts[:i]), model.get_submodule(".".join(parts[:i]))) for i in range(len(parts))]


def _dummy_ids(model: nn.Module) -> torch.Tensor:
    vocab = model.get_input_embeddings().weight.shape[0]
    device = next(model.parameters()).device
    return torch.arange(min(4, vocab), device=device).unsqueeze(0)  # [1, 4]


@contextmanager
def eval_mode(module: nn.Module) -> Iterator[nn.Module]:
    """``module`` in eval mode for the block; then every submodule gets its own flag back. A
    PeftModel reports ``training=True`` at its top over submodules in eval mode (loaded with
    ``from_pretrained``), so ``module.train(was_training)`` switched all their dropout on."""
    flags = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        yield module
    finally:
        for m, training in flags:
            m.training = training


@torch.no_grad()
def find_layout(model: nn.Module) -> DecoderLayout:
    """Locate blocks, post-block modules and LM head, and check that running them in pieces
    reproduces the model's logits exactly (models that post-process logits, e.g. soft-capping,
    are refused here rather than giving a reference that silently differs)."""
    blocks_name, blocks = find_decoder_blocks(model)
    lm_head = model.get_output_embeddings()
    if lm_head is None:
        raise RlkitError(f"{type(model).__name__}: no output embeddings (LM head) found")

    # candidates: siblings of the block list and of each of its ancestors
    ancestors = _ancestors(model, blocks_name)
    ancestor_ids = {id(m) for _, m in ancestors}
    candidates: list[tuple[str, nn.Module]] = []
    for prefix, parent in ancestors:
        for child_name, child in parent.named_children():
            if child is blocks or child is lm_head or id(child) in ancestor_ids:
                continue
            candidates.append((f"{prefix}.{child_name}" if prefix else child_name, child))

    events: list[str] = []
    captured: dict[str, torch.Tensor] = {}

    def on_candidate(name: str):
        return lambda module, args: events.append(name)

    def on_last_block(module, args, output):
        events.append("<last block>")
        captured["hidden"] = output[0] if isinstance(output, tuple) else output

    handles = [m.register_forward_pre_hook(on_candidate(n)) for n, m in candidates]
    handles.append(blocks[-1].register_forward_hook(on_last_block))
    try:
        with eval_mode(model):  # no dropout: the check below compares exactly
            ids = _dummy_ids(model)
            # the mask says these ids are all real tokens (a pad id among them made transformers warn)
            logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits
    finally:
        for handle in handles:
            handle.remove()
    if "<last block>" not in events:
        raise RlkitError(f"{type(model).__name__}: the forward pass never ran {blocks_name}[-1]")

    after = events[events.index("<last block>") + 1 :]
    by_name = dict(candidates)
    post_names = list(dict.fromkeys(after))  # first calls, in call order
    layout = DecoderLayout(blocks, blocks_name, [by_name[n] for n in post_names], post_names, lm_head)
    with eval_mode(model):
        rebuilt = lm_head(run_post(layout.post, captured["hidden"]))
    if not torch.equal(rebuilt, logits):
        raise RlkitError(
            f"{type(model).__name__}: logits are not lm_head(final norm(last block)); "
            "models that post-process logits (e.g. soft-capping) are not supported"
        )
    return layout


def capture_block_input(target: nn.Module, run: Callable[[], Any]) -> tuple[torch.Tensor, tuple, dict[str, Any]]:
    """Call ``run()`` and stop it when it reaches ``target``: (hidden, other args, kwargs)."""
    captured: dict[str, Any] = {}

    def stop(module, args, kwargs):
        captured["args"], captured["kwargs"] = args, dict(kwargs)
        raise _StopForward

    handle = target.register_forward_pre_hook(stop, with_kwargs=True)
    try:
        run()
    except _StopForward:
        pass
    finally:
        handle.remove()
    if not captured:
        raise RlkitError(f"the forward pass never reached {type(target).__name__}")
    args, kwargs = captured["args"], captured["kwargs"]
    return (args[0], tuple(args[1:]), kwargs) if args else (kwargs.pop("hidden_states"), (), kwargs)


def run_trunk(
    model: nn.Module,
    layout: DecoderLayout,
    index: int,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
) -> BranchInput:
    """Run the model up to (not including) block ``index`` and return what enters it.
    ``index == num_blocks`` stops before the post-block modules (or the LM head)."""
    if index < layout.num_blocks:
        target = layout.blocks[index]
    else:
        target = layout.post[0] if layout.post else layout.lm_head
    hidden, args, kwargs = capture_block_input(
        target,
        lambda: model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False),
    )
    return BranchInput(hidden=hidden, index=index, args=args, kwargs=kwargs)


# T5 blocks return (hidden, self-attention bias, cross-attention bias): the first block computes
# the relative position biases and the model hands them to every later block.
_PASSED_ON_BIASES = {"position_bias": 1, "encoder_decoder_position_bias": 2}


def run_blocks(blocks: Sequence[nn.Module], hidden: torch.Tensor, branch: BranchInput) -> torch.Tensor:
    """Apply ``blocks`` in order with the arguments the model gave its own blocks (and, for
    T5-style blocks given their arguments by name, the biases each block passes on)."""
    kwargs = dict(branch.kwargs)
    for block in blocks:
        out = block(hidden, *branch.args, **kwargs)
        hidden = out[0] if isinstance(out, tuple) else out  # [B, T, H]
        for name, slot in _PASSED_ON_BIASES.items():
            if name in kwargs and isinstance(out, tuple) and len(out) > slot and out[slot] is not None:
                kwargs[name] = out[slot]
    return hidden


def run_post(post: Sequence[nn.Module], hidden: torch.Tensor) -> torch.Tensor:
    for module in post:
        hidden = module(hidden)
    return hidden


@contextmanager
def capture_head_input(lm_head: nn.Module) -> Iterator[dict[str, torch.Tensor]]:
    """Record the LM head's input (the final hidden state) during a normal forward, so heads
    can read it in generation loops that use the model's own KV cache."""
    captured: dict[str, torch.Tensor] = {}

    def hook(module, args):
        captured["hidden"] = args[0]  # [B, T, H]

    handle = lm_head.register_forward_pre_hook(hook)
    try:
        yield captured
    finally:
        handle.remove()
