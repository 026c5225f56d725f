"""Checkpoint folders that are either complete or absent.

A checkpoint is written into a hidden temporary folder beside its final place and renamed
into place only when every file is on disk, so a run killed mid-write leaves no folder that
``latest_checkpoint`` or a resume would pick up. Every folder rlkit writes carries the
marker file ``.rlkit-written``; leftover temporary folders are removed on the next save only
if they carry it, so a user's own ``.tmp-*`` folder is never touched. A write that fails
(a full disk) removes its temporary folder and says what happened (:func:`write_errors`).
"""

from __future__ import annotations

import errno
import os
import pickle
import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from rlkit_core.errors import RlkitError
from rlkit_methods.run.state import refused, rng_state, set_rng_state  # noqa: F401 (one implementation, kept importable from here)

CHECKPOINT_PATTERN = re.compile(r"^checkpoint_(\d+)$")
COMPLETE_MARKER = "COMPLETE"
TMP_PREFIX = ".tmp-"
RLKIT_MARKER = ".rlkit-written"  # in every folder rlkit writes: clean-up touches only these
TORCH_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")  # files torch.save writes in checkpoints


def temporary_for(final: str | os.PathLike) -> Path:
    """The hidden folder a checkpoint is written into before it is renamed to ``final``."""
    final = Path(final)
    return final.parent / f"{TMP_PREFIX}{final.name}"


def is_rlkit_temporary(path: str | os.PathLike) -> bool:
    """A hidden temporary folder that rlkit wrote (it carries the marker file)."""
    path = Path(path)
    return path.name.startswith(TMP_PREFIX) and path.is_dir() and (path / RLKIT_MARKER).is_file()


def _remove_ours(path: Path) -> None:
    if path.exists():
        if not is_rlkit_temporary(path):
            raise RlkitError(f"{path}: exists and was not written by rlkit (no {RLKIT_MARKER}); move it away")
        shutil.rmtree(path)


def start_temporary(final: str | os.PathLike) -> Path:
    """Create an empty temporary folder for ``final``, with rlkit's marker (main process only)."""
    tmp = temporary_for(final)
    _remove_ours(tmp)
    tmp.mkdir(parents=True)
    (tmp / RLKIT_MARKER).write_text("written by rlkit; a .tmp- folder holding this file may be deleted\n")
    return tmp


def discard_temporary(final: str | os.PathLike) -> None:
    """Remove the temporary folder of a checkpoint whose write failed (main process only)."""
    tmp = temporary_for(final)
    if is_rlkit_temporary(tmp):
        shutil.rmtree(tmp, ignore_errors=True)


def commit_temporary(final: str | os.PathLike) -> Path:
    """Mark the temporary folder complete and rename it to ``final`` (main process only).

    An older ``final`` (e.g. ``best_checkpoint``) is kept until the new one is in place.
    """
    final, tmp = Path(final), temporary_for(final)
    (tmp / COMPLETE_MARKER).write_text("ok\n")
    _fsync_tree(tmp)
    if final.exists() and (final.is_symlink() or not ((final / RLKIT_MARKER).is_file() or (final / COMPLETE_MARKER).is_file())):
        raise RlkitError(f"{final}: exists and was not written by rlkit (no {RLKIT_MARKER}); move it away, or set "
                         f"train.checkpoint_dir to a new folder")
    if final.exists():
        old = final.parent / f"{TMP_PREFIX}{final.name}-old"
        _remove_ours(old)
        final.rename(old)
        (old / RLKIT_MARKER).touch()  # a folder of an older rlkit has none; this one is ours
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(final)
    return final


@contextmanager
def atomic_directory(final: str | os.PathLike) -> Iterator[Path]:
    """Single-process form: yield a temporary folder, rename it to ``final`` on success.

    On an exception the temporary folder is removed and ``final`` is left as it was.
    """
    tmp = start_temporary(final)
    try:
        with write_errors(final):
            yield tmp
            commit_temporary(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextmanager
def write_errors(final: str | os.PathLike) -> Iterator[None]:
    """Around a checkpoint write (every process): a failed write removes the temporary folder,
    and a full disk is said in one line instead of a zip writer's message."""
    final = Path(final)
    try:
        yield
    except (OSError, RuntimeError) as exc:
        full = out_of_space(exc, final.parent)  # before the partial files are removed
        discard_temporary(final)
        if full:
            raise RlkitError(
                f"{final}: no space left on the device of {final.parent} while writing the checkpoint; the partial "
                f"checkpoint was removed ({_size(_free_bytes(final.parent))} free now); free some space or set "
                f"train.checkpoint_dir to a disk with room"
            ) from exc
        raise


LOW_SPACE = 64 * 2**20  # a write that failed with less than this free ran out of space


def out_of_space(exc: BaseException, where: Path) -> bool:
    """ENOSPC/EDQUOT anywhere in the exception's chain, or a write that failed (torch's zip
    writer says only ``iostream error`` or ``unexpected pos``) on a disk with almost nothing free."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        seen = seen.__cause__ or seen.__context__
    free = _free_bytes(where)
    return free is not None and free < LOW_SPACE


def _free_bytes(where: Path) -> int | None:
    for path in (where, *where.parents):
        try:
            return shutil.disk_usage(path).free
        except OSError:
            continue
    return None


def _size(n: int | None) -> str:
    if n is None:
        return "unknown"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _fsync_tree(root: Path) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())


def remove_stale_temporaries(parent: str | os.PathLike) -> None:
    """Delete temporary folders left by a killed run: only those with rlkit's marker."""
    parent = Path(parent)
    if parent.is_dir():
        for path in parent.iterdir():
            if is_rlkit_temporary(path):
                shutil.rmtree(path, ignore_errors=True)


@contextmanager
def read_errors(directory: str | os.PathLike) -> Iterator[None]:
    """Around loading a checkpoint: a failure caused by a truncated or damaged file, or by a
    file that holds code (refused by ``weights_only`` loading), names the file in one line;
    any other failure (e.g. a model that does not fit) passes unchanged. An engine's own
    one-line guess (accelerate's "does not fit this model" for any RuntimeError) gives way to
    a damaged file found here."""
    directory = Path(directory)
    try:
        yield
    except Exception as exc:
        holding_code = refusing_file(directory, exc) if isinstance(exc, pickle.UnpicklingError) else None
        if holding_code is not None:
            raise refused(holding_code, exc) from None
        damaged = damaged_files(directory)
        if not damaged:
            raise
        path, why = damaged[0]
        more = f" (and {len(damaged) - 1} more files)" if len(damaged) > 1 else ""
        raise RlkitError(f"{path}: {why}{more}; checkpoint {directory} cannot be loaded, resume from an earlier one") from exc


def refusing_file(directory: str | os.PathLike, exc: Exception) -> Path | None:
    """The file of a checkpoint whose ``weights_only`` load fails as ``exc`` did (an engine's
    loader, e.g. accelerate's ``load_state``, does not say which file it was reading)."""
    import torch

    for path in sorted(Path(directory).rglob("*")):
        if not path.is_file() or path.suffix not in TORCH_SUFFIXES:
            continue
        for mmap in (True, False):  # mmap: the pickle is checked without reading the tensors
            try:
                torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
            except pickle.UnpicklingError as other:
                if str(other) == str(exc):
                    return path
            except Exception:  # noqa: BLE001 - not this file's refusal (an old format needs mmap off)
                continue
            break
    return None


def damaged_files(directory: str | os.PathLike) -> list[tuple[Path, str]]:
    """Files of a checkpoint that are cut short or corrupt: safetensors whose data ends past the
    file, torch zip files whose directory or checksums are wrong, JSON that does not parse."""
    found = []
    for path in sorted(Path(directory).rglob("*")):
        if not path.is_file():
            continue
        why = _damage(path)
        if why:
            found.append((path, why))
    return found


def _damage(path: Path) -> str | None:
    import json
    import struct
    import zipfile

    size = path.stat().st_size
    try:
        if path.suffix == ".safetensors":
            with open(path, "rb") as handle:
                head = handle.read(8)
                if len(head) < 8:
                    return f"truncated ({size} bytes, no header)"
                (length,) = struct.unpack("<Q", head)
                if 8 + length > size:
                    return f"truncated ({size} bytes; the header alone needs {8 + length})"
                header = json.loads(handle.read(length))
            end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
            return f"truncated ({size} bytes of {8 + length + end})" if 8 + length + end > size else None
        if path.suffix in TORCH_SUFFIXES:
            if not zipfile.is_zipfile(path):
                return f"truncated or not a torch file ({size} bytes, no zip directory at its end)"
            with zipfile.ZipFile(path) as archive:
                bad = archive.testzip()
            return f"corrupt (entry {bad} fails its checksum)" if bad else None
        if path.suffix == ".json":
            json.loads(path.read_text())
    except (OSError, ValueError, KeyError, TypeError, IndexError, zipfile.BadZipFile, struct.error) as exc:
        return f"damaged ({type(exc).__name__}: {str(exc).splitlines()[0][:100] if str(exc) else ''})"
    return None


def is_complete(path: str | os.PathLike) -> bool:
    return (Path(path) / COMPLETE_MARKER).is_file()


def latest_checkpoint(checkpoint_dir: str | os.PathLike) -> Path | None:
    """The complete ``checkpoint_<step>`` with the highest step, or None."""
    found = [(step, path) for step, path in _checkpoints(Path(checkpoint_dir)) if is_complete(path)]
    return max(found)[1] if found else None


def resolve_resume_path(path: str | os.PathLike) -> Path:
    """``train.resume_from_checkpoint`` may name a checkpoint or a checkpoint_dir (latest).

    A ``checkpoint_<n>`` folder is renamed into place only once complete, so one without the
    ``COMPLETE`` marker had it removed: it is refused, never skipped for an older checkpoint."""
    path = Path(path)
    if is_complete(path):
        return path
    if path.is_dir() and CHECKPOINT_PATTERN.match(path.name):
        raise RlkitError(
            f"train.resume_from_checkpoint: {path} has no {COMPLETE_MARKER} marker, so it may be incomplete; "
            f"resume from an earlier checkpoint, or restore the marker if you know it is whole"
        )
    latest = latest_checkpoint(path)
    unmarked = [p for p in _checkpoints(path) if not is_complete(p[1]) and (latest is None or p[0] > _step(latest))]
    if unmarked:
        newest = max(unmarked)[1]
        instead = f"train.resume_from_checkpoint={latest}" if latest is not None else "a new run"
        raise RlkitError(
            f"train.resume_from_checkpoint: {newest} is newer than any complete checkpoint but has no {COMPLETE_MARKER} "
            f"marker (removed?); resume from an earlier one explicitly ({instead}), or restore the marker if you know it is whole"
        )
    if latest is not None:
        return latest
    raise RlkitError(f"train.resume_from_checkpoint: no complete checkpoint at {path}")


def complete_checkpoints(root: str | os.PathLike) -> list[tuple[int, Path]]:
    """(step, folder) of every complete ``checkpoint_<step>`` in ``root``, in step order."""
    return sorted((step, path) for step, path in _checkpoints(Path(root)) if is_complete(path))


def _checkpoints(root: Path) -> list[tuple[int, Path]]:
    if not root.is_dir():
        return []
    return [(int(m.group(1)), p) for p in root.iterdir() if (m := CHECKPOINT_PATTERN.match(p.name)) and p.is_dir()]


def _step(checkpoint: Path) -> int:
    return int(CHECKPOINT_PATTERN.match(checkpoint.name).group(1))
