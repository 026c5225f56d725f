"""rlkit-accelerate: trainers on HF transformers + accelerate (DDP, DeepSpeed, FSDP)."""
