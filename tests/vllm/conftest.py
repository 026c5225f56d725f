"""tests/vllm needs vLLM and runs in ./.venv-vllm (``./dev.sh test`` runs it there, after the
NeMo venv's tests). The main venv has no vLLM and collects nothing here."""

from importlib.util import find_spec

collect_ignore = [] if find_spec("vllm") and find_spec("rlkit_vllm") else ["engine"]
