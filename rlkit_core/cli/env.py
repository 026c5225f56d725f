"""``rlkit env``: what a bug report needs, the versions of rlkit, its plugins and the libraries
they run on, and whether CUDA is there. Versions come from package metadata; only the CUDA
line imports torch, inside the function, so ``rlkit --help`` never pays for it."""

from __future__ import annotations

import platform
import sys
from importlib import metadata
from typing import Any

# libraries a run may use, in the order a reader looks for them
LIBRARIES = (
    "torch",
    "transformers",
    "accelerate",
    "peft",
    "deepspeed",
    "bitsandbytes",
    "datasets",
    "tensorboard",
    "wandb",
    "megatron-core",
    "nemo_toolkit",
)


def distribution_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def cuda_info() -> dict[str, Any]:
    """CUDA as torch sees it: available, the build's CUDA version, the devices."""
    try:
        import torch
    except Exception as exc:  # torch missing or broken: say so instead of failing the report
        return {"available": False, "error": f"{type(exc).__name__}: {exc}"}
    available = torch.cuda.is_available()
    return {
        "available": available,
        "build": torch.version.cuda,
        "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if available else [],
    }


def collect(host) -> dict[str, Any]:
    """Everything ``rlkit env`` prints, as plain data."""
    plugins = [
        {"name": s.name, "distribution": s.distribution, "version": s.version, "status": s.status}
        for s in host.statuses.values()
        if s.source == "entry point"
    ]
    return {
        "rlkit-core": distribution_version("rlkit-core"),
        "plugins": plugins,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "libraries": {name: distribution_version(name) for name in LIBRARIES},
        "cuda": cuda_info(),
    }


def format_lines(info: dict[str, Any]) -> list[str]:
    """``name: value`` lines, as pip's and accelerate's ``env`` commands print them."""
    lines = [f"rlkit-core: {info['rlkit-core'] or 'not installed (running from source)'}"]
    for p in info["plugins"]:
        status = "" if p["status"] == "loaded" else f" ({p['status']})"
        lines.append(f"{p['distribution'] or p['name']}: {p['version'] or '-'}{status} [plugin {p['name']}]")
    lines += [f"python: {info['python']}", f"platform: {info['platform']}"]
    lines += [f"{name}: {version or 'not installed'}" for name, version in info["libraries"].items()]
    cuda = info["cuda"]
    if "error" in cuda:
        lines.append(f"cuda: unknown ({cuda['error']})")
    elif cuda["available"]:
        lines.append(f"cuda: available (CUDA {cuda['build']}; {', '.join(cuda['devices'])})")
    else:
        lines.append(f"cuda: not available (torch built {'with CUDA ' + cuda['build'] if cuda['build'] else 'for CPU only'})")
    return lines
