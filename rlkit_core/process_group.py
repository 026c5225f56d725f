"""Leaving torch.distributed cleanly when a run's process ends.

An engine that runs on several processes calls :func:`destroy_at_clean_exit` once its
process group exists. Left to the interpreter's finalisation, a gloo process group can abort
a process whose run succeeded: a gloo worker thread drops its last finished collective late,
needs the GIL to free the tensors Python let go of, and finds the interpreter shutting down
("terminate called without an active exception", SIGABRT), which torchrun reports as a
failed run. accelerate's ``end_training`` would destroy the group, but a trainer stays usable
after ``train()`` returns (trlX scripts evaluate or save it afterwards), so the group has to
live until the script ends: an ``atexit`` handler, which runs while the interpreter is whole.
"""

from __future__ import annotations

import atexit
import sys
import time

_registered = False

# How long the exit handler leaves the GIL to gloo's worker threads; each is at most a free
# of a few tensors away from idle.
WORKER_GRACE_S = 0.25


def destroy_at_clean_exit() -> None:
    """At exit, let gloo's worker threads finish, and destroy the default process group unless
    the interpreter exits on an uncaught exception. Safe to call more than once, and a no-op
    at exit for a group the script destroyed itself."""
    global _registered
    if not _registered:
        atexit.register(_leave_process_group)
        _registered = True


def _leave_process_group() -> None:
    import torch.distributed as dist

    # After an uncaught exception this rank may still have collectives queued that the other
    # ranks never join, and destroying waits for them: leave the group to the launcher.
    failed = getattr(sys, "last_value", None) is not None
    if not failed and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    # Destroying joins the worker threads only if nothing else holds the group (a DDP model
    # does); either way, a worker still waiting to free a finished collective's tensors gets
    # the GIL now rather than during finalisation.
    time.sleep(WORKER_GRACE_S)
