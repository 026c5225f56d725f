"""tests/vllm needs vLLM and runs in ./.venv-vllm (``./dev.sh test-vllm``); tests/vllm/nemo
also needs the NeMo venv (the trainer's side). The main venv has no vLLM and collects nothing here."""

from importlib.util import find_spec

import pytest

collect_ignore = [] if find_spec("vllm") and find_spec("rlkit_vllm") else ["engine", "nemo"]


@pytest.fixture(scope="session")
def nemo_python():
    """The NeMo venv's interpreter: a trainer-side Python without vLLM (RLKIT_NEMO_VENV, default
    ./.venv-nemo; ./dev.sh test and test-vllm build it)."""
    import os
    from pathlib import Path

    if os.environ.get("RLKIT_SKIP_NEMO") == "1":  # dev.sh's switch: no NeMo venv was built
        pytest.skip("RLKIT_SKIP_NEMO=1: no NeMo venv for the trainer's side")
    repo = Path(__file__).parents[2]
    venv = Path(os.environ.get("RLKIT_NEMO_VENV", ".venv-nemo"))
    python = (venv if venv.is_absolute() else repo / venv) / "bin" / "python"
    assert python.exists(), f"{python} is missing: these tests need the NeMo venv beside this one (./dev.sh test-vllm builds it)"
    return python
