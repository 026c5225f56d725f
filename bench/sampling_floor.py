"""The compute floor of one sampling call: the time the model's matrix products alone take.

Every sampler, HF ``generate``, rlkit's or vLLM's, must multiply each new token's hidden state
through every linear layer of the model: for a call of P prompts x G samples x T new tokens,
one prefill over the distinct prompts' tokens (the LM head on each prompt's last position only)
and T decode steps of P*G rows each. ``floor_seconds`` times exactly those products with the
model's own weights, each by the fastest kernel here (torch's ``linear``, the engine's; with vLLM
installed also vLLM's CPU oneDNN kernel on prepacked weights, 20-25% faster at 32 rows), and
nothing else: no attention, norms, activations, sampling, KV cache or Python. A sampler's time at a
shape divided by the floor says how much of its time is overhead; the floor divided into the
engine's time bounds what any sampler built on these kernels can gain over the engine.

Used by ``bench/vllm_sampling.py`` (the ``floor`` column); on its own:

    OMP_NUM_THREADS=1 .venv-vllm/bin/python bench/sampling_floor.py [--model smollm2-135m] [--shapes 32x1x16,8x4x16]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def linear_weights(model: torch.nn.Module) -> list[torch.Tensor]:
    """The weight of every linear layer the forward runs, the LM head last (a tied head, which
    is no ``nn.Linear`` of its own, still counts as a product)."""
    head = model.get_output_embeddings().weight
    convs = [name for name, m in model.named_modules() if type(m).__name__ == "Conv1D"]
    if convs:  # GPT-2's layers keep (in, out) weights: a floor over nn.Linear alone would skip them
        raise SystemExit(f"sampling_floor: {type(model).__name__} has Conv1D layers ({convs[0]}, ...); "
                         f"the floor reads nn.Linear layers (Llama-family models such as SmolLM2)")
    return [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear) and m.weight is not head] + [head]


def kernels(weights: list[torch.Tensor]) -> list[list]:
    """Per weight, the ways to multiply by it here: torch's ``linear`` and, where vLLM is
    installed, its CPU backend's oneDNN kernel on a prepacked copy (what vLLM's layers run)."""
    choices = [[lambda x, w=w: torch.nn.functional.linear(x, w)] for w in weights]
    try:
        from vllm import _custom_ops as ops
    except ImportError:
        return choices
    if getattr(ops, "_supports_onednn", False):
        for options, w in zip(choices, weights):
            handler = ops.create_onednn_mm(w.t(), 32)
            options.append(lambda x, h=handler: ops.onednn_mm(h, x, None))
    return choices


def products_seconds(weights: list[torch.Tensor], rows: int, *, lm_head_rows: int | None = None, repeats: int = 3,
                     choices: list[list] | None = None) -> float:
    """CPU seconds of one pass of ``rows`` hidden states through every weight, each product by
    its fastest kernel (``choices``, from :func:`kernels`; median of ``repeats`` each); the last
    weight (the LM head) takes ``lm_head_rows`` rows when given."""
    choices = choices or kernels(weights)
    total = 0.0
    with torch.no_grad():
        for i, (w, options) in enumerate(zip(weights, choices)):
            is_head = i == len(weights) - 1
            x = torch.randn((lm_head_rows or rows) if is_head else rows, w.shape[1], dtype=w.dtype)
            best = float("inf")
            for multiply in options:
                multiply(x)  # warms the kernel and its caches, untimed
                times = []
                for _ in range(repeats):
                    start = time.process_time()
                    multiply(x)
                    times.append(time.process_time() - start)
                best = min(best, statistics.median(times))
            total += best
    return total


def floor_seconds(weights: list[torch.Tensor], prompt_tokens: list[int], group: int, new_tokens: int) -> dict[str, float]:
    """The floor of one call: ``prompt_tokens`` the distinct prompts' lengths, ``group`` samples each."""
    choices = kernels(weights)
    prefill = products_seconds(weights, sum(prompt_tokens), lm_head_rows=len(prompt_tokens), choices=choices)
    # the prefill's logits give each row's first token; the other new_tokens - 1 are decode steps
    decode = products_seconds(weights, len(prompt_tokens) * group, choices=choices) * (new_tokens - 1)
    return {"prefill_s": prefill, "decode_s": decode, "total_s": prefill + decode}


def main() -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from vllm_sampling import PROMPTS, parse_shape  # noqa: E402  (beside this file)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlkit_accelerate.assets import resolve

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--shapes", default="32x1x16,8x4x16,16x4x16,32x8x64")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    args = parser.parse_args()
    folder = str(resolve(args.model))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    for dtype in args.dtypes.split(","):
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype))
        weights = linear_weights(model)
        for shape in args.shapes.split(","):
            prompts, group, new_tokens = parse_shape(shape)
            texts = (PROMPTS * (prompts // len(PROMPTS) + 1))[:prompts]
            lengths = [len(tokenizer(t)["input_ids"]) for t in texts]
            floor = floor_seconds(weights, lengths, group, new_tokens)
            tokens = prompts * group * new_tokens
            print(f"{shape:>8} {dtype:>8}  floor {tokens / floor['total_s']:7.1f} tok/CPU s  "
                  f"(prefill {floor['prefill_s']:.3f} s, decode {floor['decode_s']:.3f} s, "
                  f"{torch.get_num_threads()} thread(s))", flush=True)


if __name__ == "__main__":
    main()
