"""Round 3, code run: nothing imports or runs code the user did not ask for (the current
folder under ``python -m``, a model's or tokenizer's ``auto_map``), and plugins cannot
corrupt rlkit's output or replace its commands."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

from probe_bad_inputs import ROOT
from r3_common import SFT, check, write

ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
    [str(ROOT), *(str(ROOT / "plugins" / p) for p in ("rlkit_methods", "rlkit_accelerate", "rlkit_nemo"))]))


def cwd_code_runs(folder: Path, args: list[str], plant) -> object:
    """``python ARGS`` from ``folder`` holding planted code that writes ``ran`` when imported."""

    def probe():
        marker = folder / "ran"
        plant(folder, marker)
        subprocess.run([sys.executable, *args], cwd=folder, env=ENV, capture_output=True, timeout=120)
        return ("security", "imported code from the current folder") if marker.exists() else None

    return check(probe)


def dist_info(folder: Path, marker: Path) -> None:
    write(folder / "evil-1.0.dist-info" / "METADATA", "Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n")
    write(folder / "evil-1.0.dist-info" / "entry_points.txt", "[rlkit]\nevil = evil_plugin\n")
    write(folder / "evil_plugin.py", f"open({str(marker)!r}, 'w').write('x')\n")


def module_named(name: str):
    return lambda folder, marker: write(folder / f"{name}.py", f"open({str(marker)!r}, 'w').write('x')\nfrom importlib import import_module\n")


def remote_code_folder(folder: Path, marker: Path, tokenizer: bool) -> Path:
    """A model (or tokenizer) folder whose config maps to code in the folder."""
    code = f"open({str(marker)!r}, 'w').write('x')\nfrom transformers import GPT2Config\nclass C(GPT2Config):\n    model_type = 'evilgpt'\n"
    write(folder / "code.py", code)
    auto = {"AutoConfig": "code.C", "AutoModelForCausalLM": "code.C"}
    if tokenizer:
        auto = {"AutoTokenizer": ["code.C", None]}
        write(folder / "tokenizer_config.json", json.dumps({"auto_map": auto, "tokenizer_class": "C"}))
    write(folder / "config.json", json.dumps({"model_type": "evilgpt", "auto_map": auto}))
    return folder


def answers_yes(load, folder: Path, marker: Path):
    """Load with ``y`` waiting on stdin: transformers' prompt would run the folder's code."""

    def probe():
        stdin, sys.stdin = sys.stdin, io.StringIO("y\n" * 10)
        try:
            with contextlib.redirect_stdout(io.StringIO()) as out:
                try:
                    load(folder)
                except Exception:  # noqa: BLE001 - refusing is right; running the code is not
                    pass
        finally:
            sys.stdin = stdin
        if marker.exists():
            return "security", "ran the folder's code after a stdin prompt"
        if "trust_remote_code" in out.getvalue() or "[y/N]" in out.getvalue():
            return "unclear", "asked on stdin"
        return None

    return check(probe)


def cli_out(args: list[str]) -> tuple[int, str, str]:
    """``rlkit ARGS`` in this process: exit code, stdout, stderr."""
    from rlkit_core.cli import main

    out, err = io.StringIO(), io.StringIO()
    app = sys.modules["rlkit_core.cli.app"]
    previous = app.err_console._file  # None: rich follows sys.stderr
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        app.err_console.file = err
        try:
            code = main(args)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        finally:
            app.err_console._file = previous
    return code, out.getvalue(), err.getvalue()


def with_plugin(plugin, fn):
    """``fn()`` with ``plugin`` registered on the process-wide host."""
    from rlkit_core.plugins import get_host

    host = get_host()
    name = host.register(plugin, f"probe-{id(plugin):x}", source="entry point")
    try:
        return fn()
    finally:
        host.unregister(name)


from rlkit_core.plugins import hookimpl  # noqa: E402


class Commands:
    def __init__(self, *names):
        self.names = names

    @hookimpl
    def rlkit_register_commands(self, app):
        for name in self.names:
            if name == "config":
                import typer

                app.add_typer(typer.Typer(), name="config")
            else:
                app.command(name)(lambda: print("plugin's own command"))


def cases(tmp: Path) -> list[tuple[str, object]]:
    probes: list[tuple[str, object]] = []

    def add(name, probe):
        probes.append((name, probe))

    # issue 32: `python -m rlkit_core` put the current folder on sys.path
    add("python -m rlkit_core from a folder with a plugin dist-info",
        cwd_code_runs(tmp / "cwd1", ["-m", "rlkit_core", "config", "validate", SFT], dist_info))
    add("python -m rlkit_core --version from a folder with yaml.py", cwd_code_runs(tmp / "cwd2", ["-m", "rlkit_core", "--version"], module_named("yaml")))
    add("python -m rlkit_core plugins from a folder with typer.py", cwd_code_runs(tmp / "cwd3", ["-m", "rlkit_core", "plugins"], module_named("typer")))
    add("python -m rlkit_core from a folder with pluggy.py", cwd_code_runs(tmp / "cwd4", ["-m", "rlkit_core", "--version"], module_named("pluggy")))
    add("rlkit (console script) from a folder with a plugin dist-info", cwd_code_runs(
        tmp / "cwd5", ["-c", "import sys; sys.path.pop(0); from rlkit_core.cli import main; main(['plugins'])"], dist_info))

    # issue 32: with model.trust_remote_code unset, transformers asked on stdin
    def load_model(folder):
        from rlkit_accelerate.build import load_base_model
        from rlkit_core import load_config

        load_base_model(load_config(SFT, [f"model.model_path={folder}"]))

    def load_tok(folder):
        from rlkit_core import load_config
        from rlkit_methods.data.tokenizers import load_tokenizer

        load_tokenizer(load_config(SFT, [f"tokenizer.tokenizer_path={folder}"]).tokenizer)

    def load_tok_engine(folder):
        from rlkit_accelerate.engine import AccelerateEngine
        from rlkit_core import load_config

        AccelerateEngine(load_config(SFT, [f"tokenizer.tokenizer_path={folder}", f"train.checkpoint_dir={tmp / 'eng'}"]))

    for label, load, tok in [("model", load_model, False), ("tokenizer", load_tok, True), ("tokenizer (engine)", load_tok_engine, True)]:
        folder = tmp / f"remote-{label.split()[0]}-{len(probes)}"
        marker = folder.parent / f"{folder.name}.ran"
        add(f"{label} folder with auto_map code and 'y' on stdin", answers_yes(load, remote_code_folder(folder, marker, tok), marker))

    # plugins: output and commands
    class Loud:
        @hookimpl
        def rlkit_register_methods(self):
            print("hello from a plugin")
            return []

    def json_clean(args):
        def probe():
            code, out, err = with_plugin(Loud(), lambda: cli_out(args))
            try:
                json.loads(out)
            except ValueError:
                return "silent-wrong", f"stdout is not JSON: {out[:80]!r}"
        return check(probe)

    add("plugin printing in a hook: rlkit plugins --json", json_clean(["plugins", "--json"]))
    add("plugin printing in a hook: rlkit env --json", json_clean(["env", "--json"]))

    def yaml_clean():
        import yaml

        code, out, err = with_plugin(Loud(), lambda: cli_out(["config", "show", SFT]))
        try:
            data = yaml.safe_load(out)
        except yaml.YAMLError:
            data = None
        return None if isinstance(data, dict) and "train" in data else ("silent-wrong", f"stdout: {out[:80]!r}")
    add("plugin printing in a hook: rlkit config show", check(yaml_clean))

    def printing_at_import(args, parse):
        def probe():
            plugin = write(tmp / f"loud{len(args)}.py", "print('hello at import')\n")
            code, out, err = cli_out([*args[:1], *args[1:], "--plugin", str(plugin)])
            try:
                parse(out)
            except Exception:  # noqa: BLE001
                return "silent-wrong", f"stdout corrupted: {out[:80]!r}"
        return check(probe)

    import yaml

    add("--plugin printing at import: rlkit config show", printing_at_import(["config", "show", SFT], lambda o: yaml.safe_load(o)["train"]))

    def entry_point_printing(args):
        def probe():
            folder = tmp / f"ep-loud-{args[0]}"
            write(folder / "loud-1.0.dist-info" / "METADATA", "Metadata-Version: 2.1\nName: loud\nVersion: 1.0\n")
            write(folder / "loud-1.0.dist-info" / "entry_points.txt", "[rlkit]\nloud = loud_plugin\n")
            write(folder / "loud_plugin.py", "print('hello at import')\n")
            env = dict(ENV, PYTHONPATH=ENV["PYTHONPATH"] + os.pathsep + str(folder))
            out = subprocess.run([sys.executable, "-c", "import sys; from rlkit_core.cli import main; sys.exit(main(sys.argv[1:]))", *args],
                                 env=env, capture_output=True, text=True, timeout=120).stdout
            try:
                json.loads(out)
            except ValueError:
                return "silent-wrong", f"stdout is not JSON: {out[:80]!r}"
        return check(probe)

    add("entry-point plugin printing at import: rlkit plugins --json", entry_point_printing(["plugins", "--json"]))

    def command_replaced(name, args):
        def probe():
            code, out, err = with_plugin(Commands(name), lambda: cli_out(args))
            if "plugin's own command" in out:
                return "silent-wrong", f"a plugin replaced the built-in {name!r}"
            if name not in err:
                return "unclear", f"no word that the plugin's {name!r} was refused: {err[:120]!r}"
        return check(probe)

    add("plugin command named run replaces the built-in", command_replaced("run", ["run", "--help"]))
    add("plugin command named plugins replaces the built-in", command_replaced("plugins", ["plugins"]))
    add("plugin command named env replaces the built-in", command_replaced("env", ["env"]))
    add("plugin command named report replaces the built-in", command_replaced("report", ["report", "--help"]))

    def new_command_works():
        code, out, err = with_plugin(Commands("hello-probe"), lambda: cli_out(["hello-probe"]))
        return None if "plugin's own command" in out else ("unclear", f"the plugin's command did not run: {err[:120]}")
    add("plugin command with a new name works", check(new_command_works))
    return probes
