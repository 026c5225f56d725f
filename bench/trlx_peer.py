"""The trlX 0.7 peer: its own venv, ``bench/.venv-trlx`` (git-ignored), pinned as trlX's
``requirements.txt`` pins it, and a checkout of trlX outside this repository.

Get the checkout (never copied into this repository): ``git clone https://github.com/CarperAI/trlx
/work/peers/trlx`` (the bench was measured at its main branch, 3340c2f, whose setup.cfg says
0.7.0 and whose requirements.txt pins transformers 4.32.0 and accelerate 0.22.0), then point
the bench at it with ``--trlx-src`` or ``RLKIT_TRLX_SRC``. The venv is made on first use:

    pip install torch==2.13.0 setuptools<81 torchtyping==0.1.5 -r <trlX's requirements.txt, filtered>

What is not installed as pinned, and why (all on one CPU process, no GPU):
- ``torch==2.0.1+cu118`` and its CUDA build deps ``triton``, ``lit``, ``cmake``: torch 2.13.0
  (the CPU build on this machine) instead, so both sides run the same torch;
  ``typing_extensions``, ``sympy``, ``mpmath`` then follow torch 2.13's floors.
- ``torchtyping==0.1.4`` fails at import with torch 2.13 ("Cannot subclass _TensorBase"):
  0.1.5, the release that fixed it.
- ``typeguard==4.1.3``: torchtyping 0.1.5 declares ``typeguard>=2.11.1,<3``, so pip refuses the
  pair; 2.13.3 (the last 2.x) instead. trlX imports typeguard only through torchtyping.
- ``setuptools<81``: ray 2.6.3 imports ``pkg_resources``, which torch 2.13's setuptools floor
  would otherwise resolve past.
- ``deepspeed==0.10.1`` does not import with torch 2.13: not installed; ``bench/standins/deepspeed``
  is put on the worker's path instead (``zero.GatheredParameters`` a no-op for unpartitioned
  parameters, as deepspeed's own is without ZeRO-3; anything else raises). ``wandb`` and ``ray`` install as pinned and stay unused (``train.tracker`` null, no
  ray session).
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

from peer import PeerError, venv_python

BENCH = Path(__file__).resolve().parent
TRLX_VENV = BENCH / ".venv-trlx"
TORCH_VERSION = "2.13.0"
# pins of trlX's requirements.txt replaced, with the line that replaces them (None: dropped)
REPLACED = {
    "torch": None, "triton": None, "lit": None, "cmake": None,  # torch==2.13.0 (CPU) instead
    "typing_extensions": None, "sympy": None, "mpmath": None,  # torch 2.13's floors decide
    "torchtyping": "torchtyping==0.1.5",  # 0.1.4 fails to import with torch 2.13
    "typeguard": "typeguard==2.13.3",  # torchtyping 0.1.5 requires typeguard<3 (trlX pins 4.1.3, used by nothing else)
    "deepspeed": None,  # does not import with torch 2.13; bench/standins/deepspeed instead
}
EXTRA = [f"torch=={TORCH_VERSION}", "setuptools>=77.0.3,<81"]  # ray 2.6.3 imports pkg_resources


def trlx_requirements(text: str) -> list[str]:
    """trlX's ``requirements.txt`` as this bench installs it: index options dropped, the pins in
    ``REPLACED`` replaced, ``EXTRA`` added; every other pin kept exactly."""
    pins = list(EXTRA)
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        name = line.split("==", 1)[0].split("[", 1)[0].strip().lower().replace("-", "_")
        if name in REPLACED:
            if REPLACED[name]:
                pins.append(REPLACED[name])
            continue
        pins.append(line)
    return pins


def trlx_source(path: str | None) -> Path:
    """The trlX checkout: ``--trlx-src``, else ``RLKIT_TRLX_SRC``; it must hold ``trlx/`` and
    ``examples/randomwalks``."""
    path = path or os.environ.get("RLKIT_TRLX_SRC")
    if not path:
        raise PeerError("the randomwalks cases need a trlX checkout: git clone https://github.com/CarperAI/trlx somewhere "
                        "outside this repository and pass --trlx-src DIR (or set RLKIT_TRLX_SRC)")
    root = Path(path).expanduser().resolve()
    if not (root / "trlx" / "trlx.py").is_file() or not (root / "examples" / "randomwalks" / "randomwalks.py").is_file():
        raise PeerError(f"--trlx-src {root}: not a trlX checkout (needs trlx/trlx.py and examples/randomwalks/)")
    return root


def trlx_versions(python: str | os.PathLike) -> dict[str, str]:
    probe = "import json, torch, transformers, accelerate; print(json.dumps({'torch': torch.__version__, " \
            "'transformers': transformers.__version__, 'accelerate': accelerate.__version__}))"
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise PeerError(f"trlX python {python}: cannot import torch/transformers/accelerate: {tail[0]}")
    import json

    return json.loads(done.stdout.strip().splitlines()[-1])


def ensure_trlx(trlx_python: str | None, source: Path) -> tuple[str, dict[str, str]]:
    """The trlX peer's interpreter and versions; creates ``bench/.venv-trlx`` when none is named."""
    if trlx_python:
        return trlx_python, trlx_versions(trlx_python)
    python = venv_python(TRLX_VENV)
    if not python.exists():
        pins = trlx_requirements((source / "requirements.txt").read_text())
        print(f"bench: creating {TRLX_VENV} with trlX's pins (once): {' '.join(pins[:2])} ...", file=sys.stderr)
        venv.EnvBuilder(with_pip=True, clear=True).create(TRLX_VENV)
        # one pip line: torch pinned beside the rest, or pip pulls a CUDA torch
        subprocess.run([str(python), "-m", "pip", "install", "-q", *pins], check=True)
    found = trlx_versions(python)
    if not found["transformers"].startswith("4.32"):
        raise PeerError(f"{TRLX_VENV}: has transformers {found['transformers']}, trlX pins 4.32.0; delete the folder and run again")
    return str(python), found
