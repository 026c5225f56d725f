"""A run owns its ``checkpoint_dir``: a lock while it runs, and no writing into another run's files.

:func:`claim` is called once per run, before anything is written there (checkpoints, the
metrics log). On the main process it

* takes ``<checkpoint_dir>/.rlkit-run.lock`` (pid, host, process start time as psutil gives
  it, on every platform). A lock whose process is gone (a killed run) is stale and taken over; a live one is refused: two runs in
  one folder would mix their files. A lock of this same process (an earlier ``train()`` in a
  notebook) is taken over too: runs in one process follow each other.
* refuses a folder that holds another run's files (``checkpoint_<n>``, ``best_checkpoint``,
  ``hf_model``, the metrics log) unless the run resumes that same run
  (``train.resume_from_checkpoint`` inside ``checkpoint_dir``) or was asked to replace them
  (``train.overwrite_checkpoint_dir``). A resume whose ``checkpoint_dir`` or ``logging_dir``
  holds the files of a run other than the one it resumes is refused: it would replace that
  run's checkpoints and metrics. A ``checkpoint_dir`` inside a checkpoint is refused too.
* Overwriting removes only what rlkit wrote: folders carrying its marker (``.rlkit-written``
  or ``COMPLETE``), its logs and ``report.png``. A folder without a marker, a symbolic link and
  anything else in the folder are left alone.

The lock is released by :meth:`RunDir.release` (the loop calls it in ``finally``; an
``atexit`` hook is the fallback). Other processes of a data-parallel run get a handle that
holds nothing and must wait (a barrier) until the main process has claimed the folder.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Any

from rlkit_core.errors import ConfigError, RlkitError
from rlkit_methods.run.checkpoint import CHECKPOINT_PATTERN, COMPLETE_MARKER, RLKIT_MARKER, is_rlkit_temporary
from rlkit_methods.run.metrics_log import METRICS_FILE, SAMPLES_FILE

LOCK_FILE = ".rlkit-run.lock"
RUN_FOLDERS = ("best_checkpoint", "hf_model")
LOG_FILES = (METRICS_FILE, SAMPLES_FILE)
REPORT_FILE = "report.png"


class RunDir:
    """What :func:`claim` returns: the folder, and the lock while held."""

    def __init__(self, path: Path, lock: Path | None, created: Path | None = None) -> None:
        self.path = path
        self.lock = lock
        self.created = created  # the outermost folder claim made, if any
        if lock is not None:
            atexit.register(self.release)

    def discard(self) -> None:
        """Release, and remove the folders :func:`claim` made if the run wrote nothing there
        (a run that failed to start leaves no folder behind)."""
        self.release()
        if self.created is None:
            return
        folder = self.path
        while True:
            try:
                folder.rmdir()  # only an empty folder
            except OSError:
                return
            if folder == self.created or folder.parent == folder:
                return
            folder = folder.parent

    def release(self) -> None:
        """Drop the lock (only if it is still ours). Safe to call more than once."""
        lock, self.lock = self.lock, None
        if lock is None:
            return
        atexit.unregister(self.release)
        holder = _read_lock(lock)
        if holder is not None and holder.get("pid") == os.getpid() and holder.get("host") == socket.gethostname():
            lock.unlink(missing_ok=True)

    def __enter__(self) -> "RunDir":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def claim(
    checkpoint_dir: str | os.PathLike,
    *,
    resume: bool | str | os.PathLike | None,
    overwrite: bool,
    is_main_process: bool,
    logging_dir: str | os.PathLike | None = None,
) -> RunDir:
    """Lock ``checkpoint_dir`` for this run and check it may write there (see the module).
    ``resume`` is the checkpoint (or run folder) the run resumes, or a false value."""
    root = Path(checkpoint_dir)
    if not is_main_process:
        return RunDir(root, None)
    inside = next((p for p in [root, *root.parents] if _is_checkpoint(p)), None)
    if inside is not None:
        raise ConfigError(f"train.checkpoint_dir: {root} is inside the checkpoint {inside}, another run's files; a run writes its checkpoints "
                          f"into a folder of its own: set train.checkpoint_dir to a new folder (or to {inside.parent} to resume)")
    created = next((p for p in reversed([root, *root.parents]) if not p.exists()), None)
    if root.exists() and not root.is_dir():
        raise ConfigError(f"train.checkpoint_dir: {root} is a file, not a folder; set train.checkpoint_dir to a folder")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"train.checkpoint_dir: cannot create {root}: {exc.strerror or exc}") from None
    lock = _take_lock(root / LOCK_FILE)
    handle = RunDir(root, lock, created)
    try:
        logs = Path(logging_dir) if logging_dir else root / "logs"
        found = run_files(root, logs)
        resumed = _run_of(resume) if resume and not isinstance(resume, bool) else None
        if resumed is not None:
            own = _same_folder(resumed, root)
            theirs = [p for p in found if not own or (p.parent == logs and not _same_folder(logs, _logs_of(resume, resumed)))]
        if resumed is not None and theirs:
            shown = str(theirs[0].relative_to(root)) if theirs[0].is_relative_to(root) else str(theirs[0])
            raise ConfigError(
                f"train.checkpoint_dir: {root} holds another run's files ({shown}), but this run resumes {resume}; "
                f"resuming would replace them: set train.checkpoint_dir to {resumed} (that run's folder) or to a new "
                f"folder, and train.logging_dir to a folder of its own"
            )
        if found and not resume:
            if not overwrite:
                shown = ", ".join(str(p.relative_to(root)) if p.is_relative_to(root) else str(p) for p in found[:3])
                more = f" and {len(found) - 3} more" if len(found) > 3 else ""
                raise ConfigError(
                    f"train.checkpoint_dir: {root} holds another run's files ({shown}{more}); resume it with "
                    f"train.resume_from_checkpoint={root}, or use a new folder (train.checkpoint_dir), "
                    f"or replace that run with train.overwrite_checkpoint_dir=true"
                )
            for path in found:
                if path.is_symlink() or not path.is_dir():
                    path.unlink()  # a link itself, never what it points to
                elif _written_by_rlkit(path):
                    shutil.rmtree(path)
    except BaseException:
        handle.release()
        raise
    return handle


def run_files(root: Path, logs: Path) -> list[Path]:
    """What a run leaves in its folders (and nothing a user put there), sorted."""
    found = []
    if root.is_dir():
        for path in root.iterdir():
            if path.is_dir() and (CHECKPOINT_PATTERN.match(path.name) or path.name in RUN_FOLDERS or is_rlkit_temporary(path)):
                found.append(path)
        if (root / REPORT_FILE).is_file():
            found.append(root / REPORT_FILE)
    found += [logs / name for name in LOG_FILES if (logs / name).is_file()]
    return sorted(found, key=lambda p: (not p.name.startswith("checkpoint_"), p.name))


def _is_checkpoint(path: Path) -> bool:
    """A checkpoint folder rlkit wrote (``checkpoint_<n>`` or ``best_checkpoint`` with a marker)."""
    named = CHECKPOINT_PATTERN.match(path.name) or path.name == "best_checkpoint"
    return bool(named) and path.is_dir() and _written_by_rlkit(path)


def _written_by_rlkit(path: Path) -> bool:
    return not path.is_symlink() and ((path / RLKIT_MARKER).is_file() or (path / COMPLETE_MARKER).is_file())


def _run_of(resume: str | os.PathLike) -> Path:
    """The run folder of a resume path: the folder holding the checkpoint, or the folder given."""
    path = Path(resume)
    return path.parent if (CHECKPOINT_PATTERN.match(path.name) or path.name in RUN_FOLDERS) else path


def _logs_of(resume: str | os.PathLike, run: Path) -> Path:
    """Where the resumed run logged: its saved config's ``train.logging_dir``, else ``<run>/logs``."""
    import yaml

    path = Path(resume)
    configs = [path / "config.yml"] if path != run else sorted(run.glob("checkpoint_*/config.yml"))
    for config in configs[-1:]:
        try:
            saved = (yaml.safe_load(config.read_text()) or {}).get("train", {}).get("logging_dir")
        except (OSError, ValueError, yaml.YAMLError, AttributeError):
            saved = None
        if saved:
            return Path(saved)
    return run / "logs"


def _same_folder(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


# --- the lock ----------------------------------------------------------------------------------


def _take_lock(lock: Path) -> Path:
    """Create ``lock`` atomically (a complete file or none: written beside it, then linked)."""
    me = {"pid": os.getpid(), "host": socket.gethostname(), "created": _process_start(os.getpid()), "since": time.time()}
    for _ in range(3):
        draft = lock.with_name(f"{lock.name}.{os.getpid()}")
        draft.write_text(json.dumps(me))
        try:
            os.link(draft, lock)  # fails if a lock exists: no two runs both win
            return lock
        except FileExistsError:
            holder = _read_lock(lock)
            if holder is not None and _alive(holder):
                since = time.strftime("%Y-%m-%d %H:%M", time.localtime(holder.get("since", 0)))
                raise RlkitError(
                    f"{lock.parent}: another rlkit run (pid {holder.get('pid')} on {holder.get('host')}, started {since}) "
                    f"is using this folder; wait for it to finish, or set train.checkpoint_dir to a new folder "
                    f"(if that run is gone, delete {lock})"
                ) from None
            lock.unlink(missing_ok=True)  # stale: its process is gone
        finally:
            draft.unlink(missing_ok=True)
    raise RlkitError(f"{lock.parent}: could not take the run lock {lock}; another run keeps taking it")


def _read_lock(lock: Path) -> dict[str, Any] | None:
    try:
        holder = json.loads(lock.read_text())
    except (OSError, ValueError):
        return None
    return holder if isinstance(holder, dict) else None


def _alive(holder: dict[str, Any]) -> bool:
    """Whether the process that wrote a lock still runs. Another host's is taken as alive
    (it cannot be checked from here); a reused pid is told apart by its start time."""
    import psutil

    if holder.get("host") != socket.gethostname():
        return True
    pid = holder.get("pid")
    if pid == os.getpid():
        return False  # an earlier run of this process (a notebook, a test): runs in one process are sequential
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        process = psutil.Process(pid)
        if process.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):  # killed, waiting to be reaped
            return False
        created = process.create_time()
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True  # someone else's process with that pid
    started = holder.get("created")
    return not isinstance(started, (int, float)) or abs(created - started) < 0.01


def _process_start(pid: int) -> float | None:
    """When the process started (seconds since the epoch, psutil's), else None."""
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None
