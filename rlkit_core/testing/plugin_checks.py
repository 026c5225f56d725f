"""Conformance checks a plugin's own tests can call."""

from __future__ import annotations

import math
import subprocess
import sys
from types import ModuleType
from typing import Any, Callable, Sequence

from rlkit_core import hookspecs
from rlkit_core.plugins import PluginHost
from rlkit_core.registry import BackendSpec, MethodSpec, PipelineSpec, RewardSpec, load_target

SPEC_TYPES = {
    "rlkit_register_methods": MethodSpec,
    "rlkit_register_backends": BackendSpec,
    "rlkit_register_pipelines": PipelineSpec,
    "rlkit_register_rewards": RewardSpec,
}


def check_plugin(plugin: ModuleType | Any, *, resolve_targets: bool = True) -> dict[str, list[str]]:
    """Assert that ``plugin`` registers cleanly on a fresh host and that every import string
    it gives resolves. Returns what it provides by kind."""
    host = PluginHost(load_entry_points=False)
    name = host.register(plugin, "under-test", source="test")
    registry = host.registry
    status = host.statuses[name]
    assert status.status == "loaded", f"plugin failed: {status.error}"
    for hook_name, spec_type in SPEC_TYPES.items():
        for impl in getattr(host.hook, hook_name).get_hookimpls():
            if impl.plugin_name != name:
                continue
            for spec in impl.function() or []:
                assert isinstance(spec, spec_type), f"{hook_name} returned {spec!r}, expected {spec_type.__name__}"
                if resolve_targets:
                    _resolve_all(spec)
    assert not registry.conflicts, f"conflicting names: {registry.conflicts}"
    return status.provides


def _resolve_all(spec: Any) -> None:
    for attribute in ("target", "config_class", "default_config"):
        value = getattr(spec, attribute, None)
        if value is not None:
            load_target(value, what=f"{type(spec).__name__} {spec.name!r} {attribute}")
    for trainer in getattr(spec, "trainers", ()):
        _resolve_all(trainer)


def check_reward_fn(fn: Callable, samples: Sequence[str], prompts: Sequence[str], outputs: Sequence[str], **extra) -> list[float]:
    """Assert trlX's reward contract: one finite float per sample. Returns the scores."""
    scores = fn(samples=list(samples), prompts=list(prompts), outputs=list(outputs), **extra)
    scores = list(scores)
    assert len(scores) == len(samples), f"reward returned {len(scores)} scores for {len(samples)} samples"
    for i, score in enumerate(scores):
        score = float(score)
        assert math.isfinite(score), f"reward {i} is {score}"
    return [float(s) for s in scores]


def check_metric_fn(fn: Callable, samples: Sequence[str], prompts: Sequence[str], outputs: Sequence[str], **extra) -> dict[str, list[float]]:
    """Assert trlX's metric contract: a dict of name -> one number per sample."""
    metrics = fn(samples=list(samples), prompts=list(prompts), outputs=list(outputs), **extra)
    assert isinstance(metrics, dict), f"metric returned {type(metrics).__name__}, expected a dict"
    for name, values in metrics.items():
        assert len(values) == len(samples), f"metric {name!r} has {len(values)} values for {len(samples)} samples"
    return metrics


def check_imports_no_torch(module_name: str) -> None:
    """Assert that importing ``module_name`` in a fresh interpreter does not import torch."""
    code = f"import sys, {module_name}; sys.exit(1 if 'torch' in sys.modules else 0)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, f"importing {module_name} imports torch{result.stderr and ': ' + result.stderr}"


REGISTRATION_HOOKS = tuple(hookspecs.REGISTRATION_HOOKS)
