"""Preference methods: a reward model (Bradley-Terry) and DPO. The config is torch-free."""
