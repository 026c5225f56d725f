"""Probes past the config: plugins, run folders, checkpoint files, metrics, rewards, resume, signals."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

from probe_bad_inputs import ROOT, handled_call, refuse_call, refuse_cli

SFT = str(ROOT / "examples" / "randomwalks" / "sft_randomwalks.yml")


def more_cases(tmp: Path) -> list[tuple[str, object]]:
    probes: list[tuple[str, object]] = []

    def add(name, probe):
        probes.append((name, probe))

    # --- 7. plugins -------------------------------------------------------------------------------
    def plugin_file(name: str, source: str) -> str:
        path = tmp / f"{name}.py"
        path.write_text(textwrap.dedent(source))
        return str(path)

    def with_plugin(path: str) -> list[str]:
        return ["config", "validate", SFT, "--plugin", path]

    add("--plugin missing file", refuse_cli(with_plugin(str(tmp / "nope.py")), "not found"))
    add("--plugin a folder", refuse_cli(with_plugin(str(tmp)), "not found"))
    add("--plugin syntax error", refuse_cli(with_plugin(plugin_file("syn", "def (:\n")), "SyntaxError"))
    add("--plugin calls sys.exit(0)", refuse_cli(with_plugin(plugin_file("quits", "import sys\nsys.exit(0)\n")), "sys.exit(0)"))
    add("--plugin raises KeyboardInterrupt", refuse_cli(with_plugin(plugin_file("kbi", "raise KeyboardInterrupt\n")), "KeyboardInterrupt"))
    add("--plugin import error", refuse_cli(with_plugin(plugin_file("imp", "import not_a_module_here\n")), "not_a_module_here"))
    add("--plugin misspelled hook", refuse_cli(with_plugin(plugin_file("misspelled", """
        from rlkit_core import hookimpl
        @hookimpl
        def rlkit_register_method():
            return []
        """)), "rlkit_register_method"))
    add("--plugin whose rlkit_register_methods returns 3", refuse_cli(with_plugin(plugin_file("garbage", """
        from rlkit_core import hookimpl
        @hookimpl
        def rlkit_register_methods():
            return 3
        """)), "must return a list of MethodSpec records, got int 3"))
    add("--plugin whose rlkit_register_rewards raises", refuse_cli(with_plugin(plugin_file("raiser", """
        from rlkit_core import hookimpl
        @hookimpl
        def rlkit_register_rewards():
            raise RuntimeError("no rewards today")
        """)), "rlkit_register_rewards raised RuntimeError: no rewards today"))
    add("--plugin hangs at import", _with_env({"RLKIT_PLUGIN_IMPORT_TIMEOUT": "1"},
                                               refuse_cli(with_plugin(plugin_file("hangs", "while True:\n    pass\n")), "did not finish within 1s")))
    add("RLKIT_PLUGIN_IMPORT_TIMEOUT=soon", _with_env({"RLKIT_PLUGIN_IMPORT_TIMEOUT": "soon"}, refuse_call(
        lambda: __import__("rlkit_core.deadline", fromlist=["x"]).import_timeout(), "expected seconds")))
    for source, expect in [
        ("import sys\nsys.exit(0)\n", "called sys.exit(0) at import"), ("raise SystemExit(3)\n", "sys.exit(3)"),
        ("raise KeyboardInterrupt\n", "KeyboardInterrupt"), ("import time\ntime.sleep(30)\n", "did not finish"),
        ("from rlkit_core import hookimpl\n@hookimpl\ndef rlkit_register_methods():\n    return [1]\n", "must return a list of MethodSpec"),
        ("from rlkit_core import hookimpl\n@hookimpl\ndef rlkit_register_rewards():\n    return 'vader'\n", "must return a list of RewardSpec"),
        ("from rlkit_core import hookimpl\n@hookimpl\ndef rlkit_register_pipelines():\n    raise RuntimeError('db down')\n", "db down"),
    ]:
        add(f"entry-point plugin: {expect}", handled_call(_entry_point_failure(tmp, source, expect)))
    add("entry-point plugin whose command hook raises: --help", handled_call(_broken_command_hook(tmp)))
    add("lifecycle hook raising names the plugin", refuse_call(_raising_hook, "plugin 'observer': rlkit_step_end raised"))

    # --- 8. run folders ------------------------------------------------------------------------
    from rlkit_methods.run import checkpoint, rundir

    def finished_run(name: str) -> Path:
        root = tmp / name
        for step in (2, 4):
            with checkpoint.atomic_directory(root / f"checkpoint_{step}") as folder:
                (folder / "weights.bin").write_bytes(b"w" * step)
        (root / "logs").mkdir()
        (root / "logs" / "metrics.jsonl").write_text('{"step": 4, "kind": "train", "loss": 1.0}\n')
        return root

    def snapshot(root: Path) -> dict:
        return {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file() and p.name != rundir.LOCK_FILE}

    def refuse_keeps(name: str, claim_kwargs: dict, expect: str):
        def probe():
            root = finished_run(name)
            before = snapshot(root)
            outcome = refuse_call(lambda: rundir.claim(root, **claim_kwargs), expect)()
            return ("data-lost", "files changed") if snapshot(root) != before else outcome
        return probe

    add("new run into another run's folder", refuse_keeps("used", dict(resume=False, overwrite=False, is_main_process=True),
                                                         "holds another run's files"))
    add("second run while the first holds the lock", handled_call(_live_lock(tmp)))
    add("stale lock of a killed run", handled_call(_stale_lock(tmp)))
    add("lock file cut short", handled_call(_empty_lock(tmp)))

    def overwrite_keeps_user_files():
        root = finished_run("overwrite")
        (root / "notes.txt").write_text("mine")
        (root / ".tmp-mine").mkdir()
        rundir.claim(root, resume=False, overwrite=True, is_main_process=True).release()
        if (root / "notes.txt").read_text() != "mine" or not (root / ".tmp-mine").is_dir():
            return "data-lost", "user files removed by overwrite"
        if (root / "checkpoint_2").exists():
            return "silent-wrong", "old checkpoints kept after overwrite"

    add("overwrite removes only rlkit's files", handled_call(overwrite_keeps_user_files))

    def cleanup_keeps_user_tmp():
        (tmp / "cleanup" / ".tmp-data").mkdir(parents=True)
        (tmp / "cleanup" / ".tmp-data" / "x").write_text("keep")
        checkpoint.start_temporary(tmp / "cleanup" / "checkpoint_9")
        checkpoint.remove_stale_temporaries(tmp / "cleanup")
        if not (tmp / "cleanup" / ".tmp-data" / "x").is_file():
            return "data-lost", "a user's .tmp- folder was deleted"

    add("stale-temporary clean-up and a user's .tmp-* folder", handled_call(cleanup_keeps_user_tmp))
    add("user folder where a temporary would go", refuse_call(
        lambda: (Path(tmp / "occupied" / ".tmp-checkpoint_2").mkdir(parents=True), checkpoint.start_temporary(tmp / "occupied" / "checkpoint_2")),
        "was not written by rlkit"))

    def removed_marker():
        root = finished_run("nomarker")
        (root / "checkpoint_4" / "COMPLETE").unlink()
        return checkpoint.resolve_resume_path(root)

    add("resume with a removed COMPLETE marker", refuse_call(removed_marker, "no COMPLETE marker"))
    add("resume from a folder with no checkpoint", refuse_call(lambda: checkpoint.resolve_resume_path(tmp / "void"), "no complete checkpoint"))
    add("resume naming an incomplete checkpoint", refuse_call(
        lambda: (Path(tmp / "inc" / "checkpoint_3").mkdir(parents=True), checkpoint.resolve_resume_path(tmp / "inc" / "checkpoint_3")),
        "no COMPLETE marker"))
    add("checkpoint_dir that cannot be created", refuse_call(
        lambda: (Path(tmp / "afile").write_text("x"), rundir.claim(tmp / "afile" / "sub", resume=False, overwrite=False, is_main_process=True)),
        "cannot create"))

    from cases_files import file_cases

    probes += file_cases(tmp)
    return probes


def _with_env(env: dict, probe):
    def wrapped():
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            return probe()
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    return wrapped


def _entry_point_failure(tmp: Path, source: str, expect: str):
    def check():
        from rlkit_core.plugins import PluginHost
        from rlkit_core.testing.distributions import forget_modules, write_distribution

        name = f"probe{abs(hash(source)) % 10**8}"
        site = tmp / f"site-{name}"
        write_distribution(site, f"rlkit-{name}", {name: f"{name}_mod"}, {f"{name}_mod": source})
        sys.path.insert(0, str(site))
        os.environ["RLKIT_PLUGIN_IMPORT_TIMEOUT"] = "1"
        try:
            import importlib.metadata

            eps = [ep for ep in importlib.metadata.entry_points(group="rlkit") if ep.name == name]
            host = PluginHost(load_entry_points=False)
            host.load_entry_points(eps)
            host.registry
            status = host.statuses[name]
        finally:
            os.environ.pop("RLKIT_PLUGIN_IMPORT_TIMEOUT", None)
            sys.path.remove(str(site))
            forget_modules(f"{name}_mod")
        if status.status != "failed":
            return "silent-wrong", f"status {status.status}"
        if expect not in (status.error or ""):
            return "unclear", status.error
        return "clear", f"rlkit plugins shows: failed: {status.error}"
    return check


def _broken_command_hook(tmp: Path):
    def check():
        from rlkit_core.plugins import PluginHost, set_host
        from rlkit_core.testing.distributions import forget_modules, write_distribution

        site = tmp / "site-cmd"
        source = "from rlkit_core import hookimpl\n@hookimpl\ndef rlkit_register_commands(app):\n    raise RuntimeError('no')\n"
        write_distribution(site, "rlkit-cmdprobe", {"cmdprobe": "cmdprobe_mod"}, {"cmdprobe_mod": source})
        sys.path.insert(0, str(site))
        previous = set_host(PluginHost())
        try:
            from probe_bad_inputs import cli

            code, lines = cli(["--help"])
        finally:
            set_host(previous)
            sys.path.remove(str(site))
            forget_modules("cmdprobe_mod")
        if code != 0:
            return "unclear", f"--help exit {code}: {lines[:2]}"
        if not any("plugin 'cmdprobe'" in line for line in lines):
            return "silent-wrong", "the failure was not mentioned"
    return check


def _raising_hook():
    from rlkit_core import hookimpl
    from rlkit_core.plugins import PluginHost

    class Observer:
        @hookimpl
        def rlkit_step_end(self, step):
            raise ValueError("disk quota")

    host = PluginHost(load_entry_points=False)
    host.register(Observer(), "observer")
    host.hook.rlkit_step_end(trainer=None, step=1, metrics={}, is_main_process=True)


def _live_lock(tmp: Path):
    def check():
        root = tmp / "locked"
        from rlkit_methods.run import rundir

        holder = rundir.claim(root, resume=False, overwrite=False, is_main_process=True)
        try:
            code = f"from rlkit_methods.run.rundir import claim\nclaim({str(root)!r}, resume=True, overwrite=False, is_main_process=True)"
            result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        finally:
            holder.release()
        if result.returncode == 0:
            return "silent-wrong", "two runs in one folder"
        last = result.stderr.strip().splitlines()[-1]
        return ("clear", last[:200]) if "another rlkit run" in last else ("unclear", last[:200])
    return check


def _stale_lock(tmp: Path):
    def check():
        from rlkit_methods.run import rundir

        root = tmp / "stale"
        root.mkdir()
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
        (root / rundir.LOCK_FILE).write_text(json.dumps({"pid": int(dead.stdout), "host": socket.gethostname(), "start": 1}))
        rundir.claim(root, resume=True, overwrite=False, is_main_process=True).release()
    return check


def _empty_lock(tmp: Path):
    def check():
        from rlkit_methods.run import rundir

        root = tmp / "emptylock"
        root.mkdir()
        (root / rundir.LOCK_FILE).write_text("")
        rundir.claim(root, resume=True, overwrite=False, is_main_process=True).release()
    return check

