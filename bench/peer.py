"""The peer's interpreter: TRL 0.29.1 in its own virtual environment, made by the bench.

``bench/.venv-trl`` (git-ignored) is created on first use with the CPU torch pinned on the
same pip line as trl (otherwise pip resolves torch to a multi-GB CUDA build). Where no venv
can or should be made (the GPU image, no internet), ``--peer-python python3`` names an
interpreter that already has trl.
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
    """The peer's interpreter and its versions; creates ``bench/.venv-trl`` when none is named."""
    if peer_python:
        found = versions(peer_python)
        if found["trl"] != TRL_VERSION:
            raise PeerError(f"--peer-python {peer_python}: has trl {found['trl']}, the bench compares with trl {TRL_VERSION}; "
                            f"install trl=={TRL_VERSION} there")
        return peer_python, found
    python = venv_python(PEER_VENV)
    if not python.exists():
        print(f"bench: creating {PEER_VENV} with trl=={TRL_VERSION} (once)", file=sys.stderr)
        venv.EnvBuilder(with_pip=True, clear=True).create(PEER_VENV)
        # one pip line: torch pinned beside trl, or pip pulls a CUDA torch
        subprocess.run([str(python), "-m", "pip", "install", "-q", f"torch=={TORCH_VERSION}", f"trl=={TRL_VERSION}"], check=True)
    found = versions(python)
    if found["trl"] != TRL_VERSION:
        raise PeerError(f"{PEER_VENV}: has trl {found['trl']}, expected {TRL_VERSION}; delete the folder and run again")
    return str(python), found
