"""Every hook rlkit calls, in one place.

Plugins implement these with ``@rlkit_core.hookimpl`` on module-level functions (an entry
point in the group ``rlkit`` names the module) or on methods of an object passed to
``rlkit_core.train(..., plugins=[obj])``. Hook arguments are passed by name; an
implementation may accept any subset of them.

Registration hooks are called once per plugin when the host builds its registry; every
implementation is called and each returns a list of frozen spec records
(:mod:`rlkit_core.registry`). Lifecycle hooks are observers: every implementation is called,
on every process, and return values are ignored. Plugins never print: they log, or return
metrics from the trainer's hooks.
"""

from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("rlkit")

# -----------------------------------------------------------------------------------------
# Registration hooks
# -----------------------------------------------------------------------------------------


@hookspec
def rlkit_register_methods():
    """Register RL methods (PPO, ILQL, SFT, ...).

    :return: a list of :class:`rlkit_core.registry.MethodSpec`.

    Called once per plugin when the registry is built (first use of the plugin host). A
    method name or alias already provided by another plugin is an error naming both.
    """


@hookspec
def rlkit_register_backends():
    """Register backends (accelerate, nemo, ...): their engines, and any trainers written for them.

    :return: a list of :class:`rlkit_core.registry.BackendSpec`, such as
        ``BackendSpec("accelerate", engine="pkg.mod:AccelerateEngine", trainer_prefix="Accelerate")``.
        A backend with an ``engine`` runs every method that registers a ``trainer``, as
        ``<trainer_prefix><Method>Trainer`` (:mod:`rlkit_core.pairing`); ``trainers`` may add
        :class:`rlkit_core.registry.TrainerSpec` records for classes written by hand.

    Called once per plugin when the registry is built. Engines and trainer classes should be
    given as import strings so that listing plugins does not import torch.
    """


@hookspec
def rlkit_register_pipelines():
    """Register data pipelines: tokenizing prompt pipelines (``kind="prompt"``, selected by
    ``train.pipeline``) and data sources (``kind="source"``, selected by ``data.*``).

    :return: a list of :class:`rlkit_core.registry.PipelineSpec`.

    Called once per plugin when the registry is built.
    """


@hookspec
def rlkit_register_rewards():
    """Register reward and metric factories, selected by ``reward`` and ``metric`` in a config.

    :return: a list of :class:`rlkit_core.registry.RewardSpec`.

    Called once per plugin when the registry is built.
    """


@hookspec
def rlkit_register_generators():
    """Register generators by name, selected by ``train.generator`` (a vLLM generator, ...).

    :return: a list of :class:`rlkit_core.registry.GeneratorSpec`.

    Called once per plugin when the registry is built.
    """


@hookspec
def rlkit_register_commands(app):
    """Add commands to the ``rlkit`` command line.

    :param app: the root ``typer.Typer`` application; call ``app.command()`` or
        ``app.add_typer()`` on it.

    Called once per plugin when the CLI starts, before arguments are parsed. Keep imports
    inside the command functions so that ``rlkit --help`` stays fast.
    """


# -----------------------------------------------------------------------------------------
# Config checks
# -----------------------------------------------------------------------------------------


@hookspec
def rlkit_check_config(config):
    """Find what a run of ``config`` would refuse, before any model is loaded.

    :param config: the validated :class:`rlkit_core.TRLConfig`.
    :return: a list of problems, one line each, starting with the dotted path of the key
        (``method.gen_kwargs.top_kk: not a generation setting; did you mean top_k?``);
        an empty list when there is nothing to say.

    Called by ``rlkit config validate`` and by ``rlkit run`` before training, once per
    plugin (:func:`rlkit_core.preflight.check_config`). Import heavy libraries inside.
    """


# -----------------------------------------------------------------------------------------
# Lifecycle hooks (observers; called on every process)
# -----------------------------------------------------------------------------------------


@hookspec
def rlkit_train_start(trainer, config, is_main_process):
    """Training is about to start.

    :param trainer: the trainer instance.
    :param config: the resolved :class:`rlkit_core.TRLConfig`.
    :param is_main_process: True on the process that logs and saves.

    Called by :func:`rlkit_core.train` after the data is set up, right before ``learn()``.
    """


@hookspec
def rlkit_rollouts_made(trainer, step, num_rollouts, stats, is_main_process):
    """An online method finished a rollout phase (generation, scoring, reference forward).

    :param trainer: the trainer instance.
    :param step: the optimizer step count at which the rollouts were made.
    :param num_rollouts: how many rollouts this process now holds in its store.
    :param stats: dict of rollout statistics (``rollout_scores/mean``, ``time/rollout_*``).
    :param is_main_process: True on the process that logs and saves.

    Called by online trainers at the end of every ``make_experience``.
    """


@hookspec
def rlkit_step_end(trainer, step, metrics, is_main_process):
    """An optimizer step finished.

    :param trainer: the trainer instance.
    :param step: the number of optimizer steps taken so far (1 after the first).
    :param metrics: dict of the step's metrics (``losses/...``, ``policy/...``, ``time/...``).
    :param is_main_process: True on the process that logs and saves.

    Called by trainers after every optimizer step, after the metrics are logged.
    """


@hookspec
def rlkit_evaluation_end(trainer, step, metrics, samples, is_main_process):
    """An evaluation finished.

    :param trainer: the trainer instance.
    :param step: optimizer steps taken so far.
    :param metrics: dict of evaluation metrics (``reward/mean``, ``metrics/<name>``).
    :param samples: list of dicts with ``prompt``, ``output`` and, when scored, ``reward``.
    :param is_main_process: True on the process that logs and saves.

    Called by trainers after every evaluation, on every process, with the gathered samples.
    """


@hookspec
def rlkit_checkpoint_saved(trainer, step, path, is_main_process):
    """A checkpoint was written completely (after its atomic rename).

    :param trainer: the trainer instance.
    :param step: optimizer steps taken so far.
    :param path: the checkpoint folder (``pathlib.Path``).
    :param is_main_process: True on the process that logs and saves.
    """


@hookspec
def rlkit_train_end(trainer, error, is_main_process):
    """Training ended, normally or not.

    :param trainer: the trainer instance.
    :param error: None after a normal end, else the exception that ended training (it is
        re-raised after the hook).
    :param is_main_process: True on the process that logs and saves.

    Called by :func:`rlkit_core.train` after ``learn()`` returns or raises.
    """


REGISTRATION_HOOKS = {
    "rlkit_register_methods": "method",
    "rlkit_register_backends": "backend",
    "rlkit_register_pipelines": "pipeline",
    "rlkit_register_rewards": "reward",
    "rlkit_register_generators": "generator",
}
