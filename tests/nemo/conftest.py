"""tests/nemo/megatron needs NeMo and megatron-core and runs in ./.venv-nemo
(``./dev.sh test`` runs it there). The main venv has no NeMo: it collects only the
tests beside this file, so each test runs in exactly one place."""

from importlib.util import find_spec

collect_ignore = [] if find_spec("nemo") else ["megatron"]
