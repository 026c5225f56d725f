"""rlkit-nemo's part of ``rlkit config validate`` (the hook ``rlkit_check_config``): a config
that runs on the NeMo engine names a Megatron YAML in ``train.trainer_kwargs.megatron_cfg``
(trlX's NeMo trainers took it there too); what the engine would refuse in its arguments and
that YAML (a ``trainer_kwargs`` key, a path not found, an interpolation that does not
resolve, a section or value NeMo does not have, sizes Megatron cannot split) is reported
before anything heavy loads. Pure Python, as :mod:`rlkit_nemo.megatron_config` is, so a
config is checked where megatron-core is not installed too (a run there is refused by the
trainer, with what to install: :func:`require_megatron`)."""

from __future__ import annotations

from rlkit_core.errors import ConfigError

from rlkit_nemo.megatron_config import check_engine_kwargs, load_megatron_cfg, translate

INSTALL_HINT = "install rlkit-nemo[nemo] (NeMo 2.7.3; see docs/nemo.md)"


def require_megatron(what: str = "the NeMo engine"):
    """``megatron.core``, or a one-line error saying what to install. The engine drives
    megatron-core directly, so a GPU image needs its wheel, not NeMo's whole tree. The backend
    calls it before a trainer builds anything (``BackendSpec.requires``)."""
    try:
        import megatron.core as mcore
    except ImportError as exc:
        raise ConfigError(f"{what} needs megatron-core, which is not importable ({exc}); {INSTALL_HINT}") from None
    return mcore


def runs_on_nemo(config) -> bool:
    """``train.backend: nemo``, or a trainer named ``NeMo<Method>Trainer`` (trlX's names and the
    pairs the core makes)."""
    return (config.train.backend or "").lower() == "nemo" or config.train.trainer.lower().startswith("nemo")


def check_train_keys(train) -> None:
    """``train`` keys the engine does not take, refused in one line each."""
    if getattr(train, "minibatch_tokens", None):
        raise ConfigError("train.minibatch_tokens: the NeMo engine splits a step into micro-batches of megatron_cfg's "
                          "micro_batch_size items (a pipeline schedule runs a fixed count); unset it")


def check_config(config) -> list[str]:
    if not runs_on_nemo(config):
        return []
    kwargs = dict(config.train.trainer_kwargs or {})
    try:
        check_train_keys(config.train)
        check_engine_kwargs(kwargs)
        raw = load_megatron_cfg(kwargs["megatron_cfg"])
        # the engine runs the YAML on the processes torchrun starts (it sets devices to the
        # world size): checked here on the smallest world its TP x PP layout needs
        raw["trainer"] = dict(raw.get("trainer") or {}, devices=None, num_nodes=1)
        translate(raw, cpu=True, te=False, quiet=True)
    except ConfigError as exc:
        return list(exc.errors)
    return []

