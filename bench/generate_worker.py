"""Bench worker: sampling throughput (tokens/s) of one batch, two ways on the same model,
prompts and settings.

    python bench/generate_worker.py --spec spec.json --out result.json --variant plain|rlkit

``plain`` is ``AutoModelForCausalLM.generate`` on the tokenizer's own left-padded batch (it
runs in the peer's environment: it needs no rlkit); ``rlkit`` is the PPO rollout path, the
trainer's ``generate`` with its experience settings on a chunk from its prompt pipeline.
Both sample exactly ``new_tokens`` tokens (``min_new_tokens``), one untimed warm-up call,
then ``calls`` timed calls.
"""

from __future__ import annotations

from harness import clock, cuda_peak_bytes, read_spec, setup_torch, sync, worker_args, write_result


def sampling_kwargs(spec: dict) -> dict:
    n = spec["ppo"]["new_tokens"]
    return dict(max_new_tokens=n, min_new_tokens=n, top_k=0, top_p=1.0, do_sample=True)


def plain(spec: dict, torch, device, dtype):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(spec["model"], padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=dtype).to(device).eval()
    batch = tokenizer(spec["prompts"], return_tensors="pt", padding=True).to(device)
    kwargs = dict(sampling_kwargs(spec), eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)

    @torch.no_grad()
    def call():
        return model.generate(**batch, **kwargs)

    return call, batch["input_ids"]


def rlkit(spec: dict, torch, device, dtype):
    import tempfile

    from ppo_rlkit import build_trainer

    trainer = build_trainer(spec, 2, tempfile.mkdtemp(prefix="rlkit-bench-"))
    trainer.unwrapped_model.eval()  # as make_experience does before sampling
    batch = trainer.next_prompt_chunk()
    kwargs = dict(trainer.experience_kwargs)

    def call():
        return trainer.generate(batch["input_ids"], batch["attention_mask"], **kwargs)

    return call, batch["input_ids"]


def main() -> None:
    args = worker_args(__doc__.splitlines()[0])
    sides = {"plain": plain, "rlkit": rlkit}
    if args.variant not in sides:
        raise SystemExit(f"generate_worker: --variant must be one of {', '.join(sides)}, got {args.variant!r}")
    spec = read_spec(args.spec)
    torch, device, dtype = setup_torch(spec)
    call, prompt_ids = sides[args.variant](spec, torch, device, dtype)
    out = call()  # warm-up: first-call allocations and kernel selection
    new = out.shape[1] - prompt_ids.shape[1]
    calls = int(spec["generate"]["calls"])
    now = clock(spec["device"])
    sync(spec["device"])
    start = now()
    for _ in range(calls):
        call()
    sync(spec["device"])
    seconds = now() - start
    tokens = calls * prompt_ids.shape[0] * new
    write_result(args.out, {
        "tokens_per_s": tokens / seconds, "seconds": seconds, "calls": calls, "new_tokens": new,
        "prompt_shape": list(prompt_ids.shape), "cuda_peak_bytes": cuda_peak_bytes(spec["device"]),
        "torch": torch.__version__,
    })


if __name__ == "__main__":
    main()
