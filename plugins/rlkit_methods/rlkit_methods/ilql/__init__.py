"""ILQL: config (torch-free); losses, sampling and store import torch."""

from rlkit_methods.ilql.config import ILQLConfig, default_ilql_config

__all__ = ["ILQLConfig", "default_ilql_config"]
