"""The vLLM generator in a process of its own (``train.generator_kwargs.placement: process``).

The trainer exports the model, starts ``python -m rlkit_vllm.server`` (``python``: any
interpreter with vLLM and rlkit-vllm, e.g. ``.venv-vllm/bin/python`` beside a NeMo venv whose
pins conflict with vLLM's) and talks to it over a socket pair (:mod:`rlkit_vllm.protocol`);
weights travel through a file in shared memory, written as the engine's iteration yields them
(only what the update offers: a frozen trunk is sent once).

One server per job, owned by global rank 0. Every rank calls ``generate`` (it is collective):
the ranks' prompts are gathered, one row set per data-parallel replica (``engine.process_index``:
the ranks of one TP/PP replica hold the same prompts and get the same samples) goes to the
server in one batch, and each rank takes its replica's rows back. ``update_weights`` iterates
the engine's weights on every rank (gathering shards is collective); rank 0 writes them.

Faults are one line on every rank, and the generator refuses to sample after them: the process
dying (its exit code or signal, the last line of its log), a request unanswered within
``timeout_s``, a load that fails half-way (its weights are then unusable), a missing or unusable
vLLM under ``python``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import weakref
from pathlib import Path
from typing import Any

from rlkit_core.errors import ConfigError, RlkitError
from rlkit_core.generator import Samples, WeightUpdate

from rlkit_vllm import protocol
from rlkit_vllm.generator import one_line, plain_gen_kwargs, prompt_rows, row_seeds, to_samples


log = logging.getLogger(__name__)
LAUNCHER_VARIABLES = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
                      "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT"}


def _world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _all_gather(obj: Any) -> list[Any]:
    import torch.distributed as dist

    rank, world = _world()
    if world == 1:
        return [obj]
    out = [None] * world
    dist.all_gather_object(out, obj)
    return out


def _broadcast(obj: Any) -> Any:
    import torch.distributed as dist

    if _world()[1] == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _stop(proc: subprocess.Popen | None, sock: socket.socket | None) -> None:
    """End the server if it still runs (the generator was dropped without ``close``)."""
    if sock is not None:
        sock.close()  # the server sees the trainer's end close and stops by itself
    if proc is not None and proc.poll() is None:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _last_line(path: Path) -> str:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


class ProcessGenerator:
    """``rlkit_core.generator.Generator`` on a vLLM engine in a child process.

    ``python``: the interpreter to run it (default this one). ``timeout_s``: how long a request
    may take (``start_timeout_s`` the start). ``shm_folder``: where weight files go (default
    /dev/shm). ``folder``: where the export goes. ``dtype``, ``kv_cache_mb``, ``sleep`` and
    other keyword arguments as the in-process generator's (they go to the server)."""

    def __init__(self, engine: Any, *, python: str | None = None, folder: str | Path | None = None,
                 shm_folder: str | Path | None = None, timeout_s: float = 600.0, start_timeout_s: float = 900.0,
                 sleep: bool = False, **options):
        self.python = str(python or sys.executable)
        if not (os.path.isfile(self.python) and os.access(self.python, os.X_OK)):
            raise ConfigError(f"train.generator_kwargs.python: {self.python} is not an executable interpreter; give "
                              f"the python of a venv with vLLM and rlkit-vllm (e.g. .venv-vllm/bin/python)")
        self.tokenizer = engine.tokenizer
        self.replica = int(engine.process_index)  # the ranks of one TP/PP replica share it
        self.rank = _world()[0]
        self.timeout_s, self.sleep_mode = float(timeout_s), bool(sleep)
        self.version, self.calls, self.syncs, self.closed, self.released = 0, 0, 0, False, False
        self.broken: str | None = None
        self.last_sync: dict[str, int] = {}
        self.release_note = None if sleep else "no sleep mode (sleep=False, or vLLM's CPU backend)"
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        folder = _broadcast(str(folder or tempfile.mkdtemp(prefix="rlkit-vllm-")) if self.rank == 0 else None)
        engine.export(Path(folder))  # every rank: it may gather shards
        self.shm_folder = protocol.shm_folder(shm_folder)
        error = None
        if self.rank == 0:
            try:
                self._start(folder, dict(options, sleep=self.sleep_mode), float(start_timeout_s))
            except Exception as exc:  # every rank stops with rank 0's line
                self._shut()
                error = str(exc) if isinstance(exc, RlkitError) else \
                    f"train.generator: vllm's process could not start under {self.python} ({one_line(exc)})"
        error = _broadcast(error)
        if error:
            self.closed = True
            raise RlkitError(error)

    # the server --------------------------------------------------------------------------------

    def _start(self, folder: str, options: dict[str, Any], timeout: float) -> None:
        import rlkit_core
        import rlkit_vllm

        roots = {str(Path(m.__file__).resolve().parents[1]) for m in (rlkit_vllm, rlkit_core)}
        # not a rank of the trainer's job: torchrun's and accelerate's variables stay out of vLLM's
        # own distributed start (its store would take the job's port)
        env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES and not k.startswith("TORCHELASTIC_")}
        env["PYTHONPATH"] = os.pathsep.join([*sorted(roots), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        ours, theirs = socket.socketpair()
        fd, log_path = tempfile.mkstemp(prefix="rlkit-vllm-server-", suffix=".log")
        self.log = Path(log_path)
        with os.fdopen(fd, "w") as out:
            self.proc = subprocess.Popen([self.python, "-m", "rlkit_vllm.server", str(theirs.fileno()), folder,
                                          json.dumps(options)], pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=subprocess.STDOUT, env=env)
        theirs.close()
        self.sock = ours
        self._finalizer = weakref.finalize(self, _stop, self.proc, ours)
        reply = self._receive("its start", timeout)
        if "error" in reply:
            self._shut()
            raise RlkitError(f"{reply['error']} (the generator process runs {self.python})")
        self.vllm = reply["ready"]
        log.info("vLLM generator: %s in process %d under %s (its log: %s)", self.vllm, self.proc.pid, self.python, self.log)

    def _fail(self, message: str) -> RlkitError:
        self.broken = message
        self._shut()
        return RlkitError(message)

    def _receive(self, what: str, timeout: float) -> dict[str, Any]:
        assert self.sock is not None and self.proc is not None
        self.sock.settimeout(timeout)
        try:
            return protocol.receive(self.sock)
        except socket.timeout:
            self.proc.kill()
            raise self._fail(f"train.generator: vllm's process (pid {self.proc.pid}) did not answer {what} within "
                             f"{timeout:g} s (train.generator_kwargs.timeout_s) and was stopped; its log: {self.log}") from None
        except (protocol.Closed, OSError):
            raise self._died(what) from None

    def _died(self, what: str) -> RlkitError:
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
        last = _last_line(self.log)
        last = f"; its last line: {last}" if last and code is not None and code > 0 else ""
        return self._fail(f"train.generator: vllm's process (pid {self.proc.pid}) died during {what} "
                          f"({_exit_reason(code)}){last}; its log: {self.log}; resume the run from its last checkpoint")

    def _call(self, request: dict[str, Any], what: str) -> dict[str, Any]:
        assert self.sock is not None
        try:
            protocol.send(self.sock, request)
        except OSError:
            raise self._died(what) from None
        return self._receive(what, self.timeout_s)

    def _shut(self) -> None:
        if self.proc is not None:
            self._finalizer()

    # the generator -----------------------------------------------------------------------------

    def generate(self, input_ids, attention_mask=None, *, guidance: Any = None, **gen_kwargs) -> Samples:
        self._open()
        if guidance is not None:
            raise RlkitError("train.generator: vllm has no Q-guided decoding (ILQL's heads); use train.generator: null")
        gen_kwargs = plain_gen_kwargs(gen_kwargs)
        asked = _all_gather((self.replica, prompt_rows(input_ids, attention_mask), row_seeds(input_ids.shape[0])))
        result: Any = None
        if self.rank == 0:
            replicas = {}
            for replica, prompts, seeds in asked:
                replicas.setdefault(replica, (prompts, seeds))  # the first rank of each replica speaks for it
            prompts = [p for ps, _ in replicas.values() for p in ps]
            seeds = [s for _, ss in replicas.values() for s in ss]
            try:
                reply = self._call({"op": "generate", "prompts": prompts, "seeds": seeds, "gen_kwargs": gen_kwargs},
                                   "generate")
                if "error" in reply:
                    raise RlkitError(f"train.generator: vllm's process failed to sample ({reply['error']})")
                result, start = {}, 0
                for replica, (ps, _) in replicas.items():
                    end = start + len(ps)
                    result[replica] = (reply["rows"][start:end], reply["logprobs"][start:end])
                    start = end
            except RlkitError as exc:
                result = str(exc)
        result = _broadcast(result)
        if isinstance(result, str):
            self.broken = self.broken or result
            raise RlkitError(result)
        rows, logprobs = result[self.replica]
        self.calls += 1
        pad = gen_kwargs.get("pad_token_id", self.tokenizer.pad_token_id)
        return to_samples(input_ids, rows, logprobs, gen_kwargs, pad, self.version)

    def update_weights(self, update: WeightUpdate) -> None:
        self._open()
        error = None
        if self.rank == 0:
            path = self.shm_folder / f"rlkit-vllm-{os.getpid()}-{self.syncs}.bin"
            self.syncs += 1
            try:
                table = protocol.write_weights(path, update.weights())
                size = path.stat().st_size
                reply = self._call({"op": "load", "path": str(path), "tensors": table}, f"the sync of step {update.version}")
                if "error" in reply:
                    raise self._fail(f"train.generator: vllm failed to load the weights of step {update.version} "
                                     f"({reply['error']})")
                self.last_sync = {"tensors": len(table), "bytes": size}
            except RlkitError as exc:
                error = str(exc)
            except Exception as exc:  # writing the file (shared memory full, an engine error)
                error = f"train.generator: vllm's weights of step {update.version} could not be sent ({one_line(exc)})"
            finally:
                path.unlink(missing_ok=True)
        else:
            for _ in update.weights():  # gathering shards is collective
                pass
        error = _broadcast(error)
        if error:
            self.broken = self.broken or error
            raise RlkitError(error)
        self.version = update.version

    def release(self) -> None:
        if self.sleep_mode and not self.released and not self.closed and not self.broken:
            if self.rank == 0:
                self._call({"op": "sleep"}, "release")
            self.released = True

    def reclaim(self) -> None:
        if self.released and not self.closed and not self.broken:
            if self.rank == 0:
                self._call({"op": "wake"}, "reclaim")
            self.released = False

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.proc is not None and self.proc.poll() is None and not self.broken:
            try:
                self._call({"op": "close"}, "close")
            except RlkitError:
                pass
        self._shut()

    def _open(self) -> None:
        if self.closed:
            raise RlkitError("train.generator: vllm was closed; make a new generator")
        if self.broken:
            raise RlkitError(f"{self.broken}; its weights are unusable: resume the run from its last checkpoint"
                             if "failed to load" in self.broken else self.broken)
