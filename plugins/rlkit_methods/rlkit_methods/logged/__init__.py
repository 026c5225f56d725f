"""Policy gradient from logged completions (group-relative or leave-one-out advantages,
truncated importance weights). The config is torch-free."""
