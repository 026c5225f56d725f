"""rlkit's NeMo trainers (import NeMo and megatron-core; the package root does not)."""
