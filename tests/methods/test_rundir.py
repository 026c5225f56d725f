"""A run owns its checkpoint_dir: a lock while it runs, no writing into another run's files
unasked, clean-up that touches only what rlkit wrote, checkpoints that refuse a removed
COMPLETE marker, and a full disk said in one line (issue 16, items 1, 6, 7)."""

import json
import os
import subprocess
import sys

import pytest
import torch

from rlkit_core.errors import ConfigError, RlkitError
from rlkit_methods.run.checkpoint import (
    RLKIT_MARKER,
    atomic_directory,
    commit_temporary,
    remove_stale_temporaries,
    resolve_resume_path,
    start_temporary,
    temporary_for,
    write_errors,
)
from rlkit_methods.run.rundir import LOCK_FILE, claim


def finished_run(root, steps=(2, 4)):
    for step in steps:
        with atomic_directory(root / f"checkpoint_{step}") as tmp:
            (tmp / "weights.bin").write_bytes(b"w" * step)
    (root / "logs").mkdir(parents=True, exist_ok=True)
    (root / "logs" / "metrics.jsonl").write_text('{"step": 4, "kind": "train", "loss": 1.0}\n')
    return root


def test_a_new_run_into_another_runs_folder_is_refused_with_both_choices(tmp_path):
    root = finished_run(tmp_path / "ckpts")
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    with pytest.raises(ConfigError) as error:
        claim(root, resume=False, overwrite=False, is_main_process=True)
    message = str(error.value)
    assert len(message.splitlines()) == 1
    assert str(root) in message and "checkpoint_2" in message and "logs/metrics.jsonl" in message
    assert "train.resume_from_checkpoint" in message and "train.overwrite_checkpoint_dir=true" in message
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before  # nothing touched
    assert not (root / LOCK_FILE).exists()  # and the refused run left no lock


def test_resume_continues_and_overwrite_removes_only_rlkits_files(tmp_path):
    root = finished_run(tmp_path / "ckpts")
    (root / "notes.txt").write_text("mine")
    (root / ".tmp-my-scratch").mkdir()
    with claim(root, resume=True, overwrite=False, is_main_process=True) as run:
        assert (root / LOCK_FILE).is_file() and run.lock is not None
        assert (root / "checkpoint_4" / "weights.bin").is_file()
    assert not (root / LOCK_FILE).exists()  # released
    with claim(root, resume=False, overwrite=True, is_main_process=True):
        assert sorted(p.name for p in root.iterdir()) == [".rlkit-run.lock", ".tmp-my-scratch", "logs", "notes.txt"]
        assert not (root / "logs" / "metrics.jsonl").exists()


def test_an_empty_or_user_only_folder_is_fine(tmp_path):
    (tmp_path / "ckpts").mkdir()
    (tmp_path / "ckpts" / "README").write_text("runs go here")
    claim(tmp_path / "ckpts", resume=False, overwrite=False, is_main_process=True).release()
    claim(tmp_path / "fresh" / "deep", resume=False, overwrite=False, is_main_process=True).release()


def test_two_runs_at_once_in_one_folder_the_second_is_refused(tmp_path):
    root = tmp_path / "ckpts"
    first = claim(root, resume=False, overwrite=False, is_main_process=True)
    # another live process holds it: the lock names our own pid, seen from a child
    code = (
        "import sys; from rlkit_methods.run.rundir import claim\n"
        f"claim({str(root)!r}, resume=True, overwrite=False, is_main_process=True)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode != 0
    assert f"another rlkit run (pid {os.getpid()}" in result.stderr and "set train.checkpoint_dir to a new folder" in result.stderr
    first.release()
    subprocess.run([sys.executable, "-c", code], check=True)  # free again once released


def test_a_stale_lock_of_a_dead_process_is_taken_over(tmp_path):
    root = tmp_path / "ckpts"
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(child.stdout)
    root.mkdir()
    import socket

    (root / LOCK_FILE).write_text(json.dumps({"pid": dead_pid, "host": socket.gethostname(), "start": 1, "since": 0}))
    with claim(root, resume=False, overwrite=False, is_main_process=True):
        assert json.loads((root / LOCK_FILE).read_text())["pid"] == os.getpid()
    (root / LOCK_FILE).write_text("")  # a lock file cut short is stale too
    claim(root, resume=False, overwrite=False, is_main_process=True).release()


def test_other_processes_neither_lock_nor_check(tmp_path):
    root = finished_run(tmp_path / "ckpts")
    handle = claim(root, resume=False, overwrite=False, is_main_process=False)
    assert handle.lock is None and not (root / LOCK_FILE).exists()


def test_clean_up_touches_only_temporaries_rlkit_wrote(tmp_path):
    (tmp_path / ".tmp-user-data").mkdir()
    (tmp_path / ".tmp-user-data" / "precious.txt").write_text("keep me")
    stale = start_temporary(tmp_path / "checkpoint_6")  # a killed run's
    assert (stale / RLKIT_MARKER).is_file()
    remove_stale_temporaries(tmp_path)
    assert (tmp_path / ".tmp-user-data" / "precious.txt").read_text() == "keep me"
    assert not stale.exists()
    (tmp_path / ".tmp-checkpoint_8").mkdir()  # a user's folder where rlkit would write
    with pytest.raises(RlkitError, match=r"\.tmp-checkpoint_8: exists and was not written by rlkit"):
        start_temporary(tmp_path / "checkpoint_8")


def test_a_removed_complete_marker_is_refused_not_skipped(tmp_path):
    root = finished_run(tmp_path / "ckpts")
    assert resolve_resume_path(root) == root / "checkpoint_4"
    (root / "checkpoint_4" / "COMPLETE").unlink()
    with pytest.raises(RlkitError) as error:
        resolve_resume_path(root)
    assert "checkpoint_4 is newer than any complete checkpoint but has no COMPLETE marker" in str(error.value)
    assert f"train.resume_from_checkpoint={root / 'checkpoint_2'}" in str(error.value)
    with pytest.raises(RlkitError, match="checkpoint_4 has no COMPLETE marker"):
        resolve_resume_path(root / "checkpoint_4")


def test_a_full_disk_is_named_and_the_partial_checkpoint_removed(tmp_path, monkeypatch):
    import rlkit_methods.run.checkpoint as checkpoint

    final = tmp_path / "checkpoint_2"
    tmp = start_temporary(final)
    os.symlink("/dev/full", tmp / "trainer_state.pt")  # every write there fails as on a full disk
    # torch's zip writer fails with "iostream error" and no errno: the free space tells
    monkeypatch.setattr(checkpoint, "_free_bytes", lambda where: 1024)
    with pytest.raises(RlkitError) as error:
        with write_errors(final):
            torch.save({"w": torch.zeros(1000)}, tmp / "trainer_state.pt")
    message = str(error.value)
    assert len(message.splitlines()) == 1 and "no space left on the device" in message and str(final) in message
    assert not tmp.exists() and not final.exists()
    monkeypatch.undo()  # a plain write says ENOSPC itself, whatever the free space
    with pytest.raises(RlkitError, match="no space left"):
        with atomic_directory(final) as tmp2:
            with open("/dev/full", "w") as full:
                full.write("x" * 10000)
                full.flush()
    assert not tmp2.exists() and not temporary_for(final).exists()


def test_an_older_final_folder_is_replaced_through_our_own_temporary(tmp_path):
    final = tmp_path / "best_checkpoint"
    final.mkdir()  # written by an rlkit without markers
    (final / "COMPLETE").write_text("ok\n")
    start_temporary(final)
    commit_temporary(final)
    assert (final / RLKIT_MARKER).is_file() and not any(p.name.startswith(".tmp-") for p in tmp_path.iterdir())


def test_a_failed_write_with_room_left_is_not_called_a_full_disk(tmp_path):
    final = tmp_path / "checkpoint_2"
    tmp = start_temporary(final)
    with pytest.raises(RuntimeError, match="disk is fine"):
        with write_errors(final):
            raise RuntimeError("disk is fine, something else broke")
    assert not tmp.exists()


def test_an_earlier_run_of_this_same_process_does_not_block_the_next(tmp_path):
    first = claim(tmp_path / "ckpts", resume=False, overwrite=False, is_main_process=True)  # never released
    second = claim(tmp_path / "ckpts", resume=True, overwrite=False, is_main_process=True)
    assert second.lock is not None
    second.release()
    first.release()  # not ours any more: a no-op


def test_a_live_holder_is_refused_and_a_reused_pid_is_not(tmp_path):
    import socket

    import psutil

    root = tmp_path / "ckpts"
    root.mkdir()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        created = psutil.Process(child.pid).create_time()
        holder = {"pid": child.pid, "host": socket.gethostname(), "created": created, "since": 0}
        (root / LOCK_FILE).write_text(json.dumps(holder))
        with pytest.raises(RlkitError, match=f"another rlkit run \\(pid {child.pid} "):
            claim(root, resume=False, overwrite=False, is_main_process=True)
        # the same pid, started at another time: the lock's process is gone and the pid reused
        (root / LOCK_FILE).write_text(json.dumps(dict(holder, created=created - 100)))
        claim(root, resume=False, overwrite=False, is_main_process=True).release()
    finally:
        child.kill()
        child.wait()
