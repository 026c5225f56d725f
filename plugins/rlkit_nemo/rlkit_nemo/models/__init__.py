"""Megatron GPT models with rlkit's heads (these modules import megatron-core)."""
