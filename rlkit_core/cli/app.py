"""Typer application. Commands stay thin: they parse arguments, call the Python API and turn
known errors into one line on stderr and an exit code (2 for config, 1 for runtime).
``RLKIT_DEBUG=1`` shows the traceback instead. Nothing here imports torch."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rlkit_core.errors import RlkitError

err_console = Console(stderr=True)

app = typer.Typer(
    name="rlkit",
    help="Fine-tune language models with reinforcement learning (PPO, GRPO, ILQL, SFT, ... as the installed plugins provide).",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion, as typer apps have
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: rich's help renderer alone doubled start-up (docs/benchmarks.md)
)
config_app = typer.Typer(help="Show or check a config file.", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(config_app, name="config")

SetOption = typer.Option(
    None, "--set", "-s", metavar="KEY=VALUE", help="Override a config value: --set train.batch_size=8 (repeatable)."
)
PluginOption = typer.Option(None, "--plugin", "-p", metavar="FILE.py", help="Load a one-off plugin file (repeatable).")
ConfigArgument = typer.Argument(..., metavar="CONFIG", help="A TRLConfig YAML file.")


def _version_callback(value: bool) -> None:
    if value:
        from rlkit_core.cli.env import distribution_version

        typer.echo(f"rlkit {distribution_version('rlkit-core') or 'unknown (not installed)'}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(
        False, "--version", "-V", is_eager=True, callback=_version_callback, help="Print rlkit's version and exit."
    ),
) -> None:
    """Fine-tune language models with reinforcement learning (PPO, GRPO, ILQL, SFT, ... as the installed plugins provide)."""


def _load(config: Path, sets: Optional[List[str]], plugin_files: Optional[List[Path]]):
    from rlkit_core.config import load_config
    from rlkit_core.plugins import get_host

    host = get_host()
    for path in plugin_files or []:
        host.load_file(path)
    return load_config(config, list(sets or []))


# the main job, run by `rlkit run` with no config: PPO on SmolLM2-135M towards positive reviews.
# Package data of rlkit-core, so it works from a wheel; examples/sentiments/ppo_smollm2.yml links here.
DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "ppo_smollm2.yml"


def _preflight(resolved, source=None):
    """What the run would refuse before loading a model (:mod:`rlkit_core.preflight`), and warnings."""
    from rlkit_core.plugins import get_host
    from rlkit_core.preflight import preflight

    def warn(line: str) -> None:
        err_console.print(f"[yellow]warning:[/] {escape(line)}", highlight=False, soft_wrap=True)

    host = get_host()
    return preflight(resolved, host.registry, host.hook, warn=warn, source=source)


@app.command()
def run(
    config: Optional[Path] = typer.Argument(
        None, metavar="CONFIG", help="A TRLConfig YAML file (default: the main job, PPO on SmolLM2 towards positive reviews)."
    ),
    set_: Optional[List[str]] = SetOption,
    plugin: Optional[List[Path]] = PluginOption,
):
    """Train with a config: load_config + train, nothing more."""
    from rlkit_core.errors import ConfigError
    from rlkit_core.run import train_from_config

    if config is None:
        if not DEFAULT_CONFIG.is_file():
            raise ConfigError(f"no CONFIG given and the main job's config {DEFAULT_CONFIG} is missing; reinstall rlkit-core or pass a config file")
        config = DEFAULT_CONFIG
    from rlkit_core.cli.output import show_rlkit_logs
    from rlkit_core.preflight import checked

    show_rlkit_logs()  # e.g. "converting ... once": a first run is otherwise silent for a minute
    with checked(_preflight(_load(config, set_, plugin), config)) as resolved:  # before its data is loaded
        train_from_config(resolved)


@app.command()
def plugins(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")):
    """List plugins: name, distribution, version, what each provides, and status."""
    from rlkit_core.plugins import get_host

    host = get_host()
    host.registry  # builds the registry, which fills in what each plugin provides
    statuses = [s for s in host.statuses.values() if not (s.source == "in-process" and not s.provides)]
    if as_json:
        rows = [
            {
                "name": s.name,
                "distribution": s.distribution,
                "version": s.version,
                "source": s.source,
                "status": s.status,
                "error": s.error,
                "provides": s.provides,
            }
            for s in statuses
        ]
        conflicts = sorted(host.registry.conflicts.values())
        typer.echo(json.dumps({"plugins": rows, "conflicts": conflicts}, indent=2))
        return
    table = Table(title="rlkit plugins")
    for column in ("name", "distribution", "version", "provides", "status"):
        table.add_column(column, overflow="fold")  # never cut a name short
    for s in statuses:
        provides = "; ".join(f"{kind}: {', '.join(names)}" for kind, names in s.provides.items()) or "-"
        status = s.status if s.error is None else f"{s.status}: {s.error}"
        style = {"loaded": "green", "failed": "red", "blocked": "yellow"}[s.status]
        table.add_row(s.name, s.distribution or s.source, s.version or "-", provides, f"[{style}]{status}[/]")
    Console().print(table)
    for conflict in sorted(host.registry.conflicts.values()):
        err_console.print(f"[red]conflict:[/] {escape(conflict)}", highlight=False)


@app.command()
def env(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of lines.")):
    """Versions of rlkit, its plugins, python, torch, transformers, accelerate, ...; CUDA."""
    from rlkit_core.cli.env import collect, format_lines
    from rlkit_core.plugins import get_host

    info = collect(get_host())
    typer.echo(json.dumps(info, indent=2) if as_json else "\n".join(format_lines(info)))


@config_app.command("show")
def config_show(
    config: Path = ConfigArgument,
    set_: Optional[List[str]] = SetOption,
    plugin: Optional[List[Path]] = PluginOption,
):
    """Print the resolved config (defaults filled in, overrides applied) as YAML."""
    typer.echo(_load(config, set_, plugin).to_yaml(), nl=False)


@config_app.command("validate")
def config_validate(
    config: Path = ConfigArgument,
    set_: Optional[List[str]] = SetOption,
    plugin: Optional[List[Path]] = PluginOption,
):
    """Check a config; prints every problem, one per line, and exits 2 if there are any."""
    from rlkit_core.plugins import get_host
    from rlkit_core.run import check_names

    resolved = _load(config, set_, plugin)
    check_names(resolved, get_host().registry)
    _preflight(resolved, config)
    err_console.print(f"[green]ok[/]: {escape(str(config))} (method {resolved.method.name}, trainer {resolved.train.trainer})", highlight=False)


_CORE_COMMANDS = (list(app.registered_commands), list(app.registered_groups))


def _add_plugin_commands() -> None:
    """Plugins' commands for the current host; calling it again starts from the core ones.

    Each plugin's hook runs on its own: one that raises leaves out only its own commands
    (recorded for ``rlkit plugins``, and one warning line), never the others or ``--help``."""
    from rlkit_core.plugins import get_host

    from rlkit_core.plugin_isolation import plugin_code

    app.registered_commands[:], app.registered_groups[:] = (list(x) for x in _CORE_COMMANDS)
    host = get_host()
    for impl in host.hook.rlkit_register_commands.get_hookimpls():
        before = (list(app.registered_commands), list(app.registered_groups))
        try:
            with plugin_code():
                impl.function(**{name: app for name in impl.argnames})
            _refuse_core_names(impl.plugin_name, before)
        except Exception as exc:
            app.registered_commands[:], app.registered_groups[:] = before
            host.command_hook_failed(impl.plugin_name, exc)
            err_console.print(f"[yellow]warning:[/] plugin {impl.plugin_name!r}: {escape(str(host.statuses[impl.plugin_name].error))}",
                              highlight=False, soft_wrap=True)


def _command_name(info) -> str:
    from typer.main import get_command_name

    name = info.name or (info.callback.__name__ if getattr(info, "callback", None) else getattr(info.typer_instance.info, "name", ""))
    return get_command_name(name or "")


def _refuse_core_names(plugin: str, before: tuple[list, list]) -> None:
    """A plugin's command named as one already there (rlkit's ``run``, ``config``, ... or an
    earlier plugin's) is left out, with one warning: nothing replaces a command without a word."""
    taken = {_command_name(c) for part in before for c in part}
    for registered, old in zip((app.registered_commands, app.registered_groups), before):
        for info in [c for c in registered if c not in old and _command_name(c) in taken]:
            registered.remove(info)
            err_console.print(f"[yellow]warning:[/] plugin {plugin!r}: command {_command_name(info)!r} exists already; "
                              f"the plugin's is left out (give it another name)", highlight=False, soft_wrap=True)


class _Terminated(KeyboardInterrupt):
    """SIGTERM outside the training loop: unwinds like Ctrl-C, exits 143."""


_TERMINATED = []  # set by the SIGTERM handler: typer reports any interrupt as Exit(130)


def _on_sigterm(signum, frame):
    _TERMINATED.append(signum)
    raise _Terminated()


@contextmanager
def _sigterm_unwinds():
    """SIGTERM raises :class:`_Terminated` (the loop installs its own graceful handler)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _interrupt(exc: BaseException | None) -> int:
    """One line and 130 (SIGINT) or 143 (SIGTERM), never 0."""
    terminated = isinstance(exc, _Terminated) or bool(_TERMINATED)
    name = "SIGTERM" if terminated else "SIGINT (Ctrl-C)"
    err_console.print(f"[red]error:[/] interrupted by {name}; stopped", highlight=False)
    return 143 if terminated else 130


def main(argv: Optional[List[str]] = None) -> int:
    """Console-script entry point."""
    debug = os.environ.get("RLKIT_DEBUG", "") not in ("", "0")
    _TERMINATED.clear()
    try:
        with _sigterm_unwinds():
            _add_plugin_commands()
            code = app(args=argv, prog_name="rlkit", standalone_mode=False)
        if code == 130 and type(code) is int:  # typer turns KeyboardInterrupt into Exit(130) and returns it
            return _exit(_interrupt(None))
        if type(code) is int and code:  # a command's ctx.exit(n)
            return _exit(code)
    except KeyboardInterrupt as exc:  # raised outside a command (typer turns one inside into Exit(130))
        if debug:
            raise
        return _exit(_interrupt(exc))
    except RlkitError as exc:
        if debug:
            raise
        for line in str(exc).splitlines() or [type(exc).__name__]:
            err_console.print(f"[red]error:[/] {escape(line)}", highlight=False, soft_wrap=True)
        return _exit(exc.exit_code)
    except (typer.Exit, SystemExit) as exc:
        code = getattr(exc, "exit_code", getattr(exc, "code", 0))
        return _exit(code or 0)
    except typer.Abort as exc:
        if isinstance(exc.__context__, KeyboardInterrupt):  # click's wrapping of Ctrl-C
            return _exit(_interrupt(exc.__context__))
        err_console.print("aborted")
        return _exit(1)
    except Exception as exc:  # usage errors (click's, vendored by typer) and unexpected failures
        if hasattr(exc, "show") and isinstance(getattr(exc, "exit_code", None), int):
            exc.show()
            return _exit(exc.exit_code)
        if debug:
            raise
        err_console.print(
            f"[red]error:[/] {type(exc).__name__}: {escape(str(exc))} (set RLKIT_DEBUG=1 for the traceback)",
            highlight=False,
            soft_wrap=True,
        )
        return _exit(1)
    return _exit(0)


def _exit(code: int) -> int:
    from rlkit_core.plugin_isolation import plugin_threads

    threads = plugin_threads()
    if threads and _as_command():  # a plugin's thread would keep the command alive after its work is done
        names = ", ".join(sorted({t.name for t in threads}))
        err_console.print(f"[yellow]warning:[/] plugins left threads running ({names}); rlkit exits without waiting for them",
                          highlight=False, soft_wrap=True)
        _leave(code)
    if _as_command():
        sys.exit(code)
    return code


def _as_command() -> bool:
    """Running as ``rlkit`` or ``python -m rlkit_core`` (not called from a program or a test)."""
    main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return __name__ == "__main__" or bool(sys.argv) and Path(sys.argv[0]).name == "rlkit" or \
        getattr(main_spec, "name", None) == "rlkit_core.__main__"


def _leave(code: int) -> None:
    """Exit now: exit hooks run (run-folder locks are released), threads are not joined."""
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code if isinstance(code, int) else 1)
