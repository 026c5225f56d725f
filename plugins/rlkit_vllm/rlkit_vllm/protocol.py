"""What the trainer and a vLLM generator process say to each other (:mod:`rlkit_vllm.process`,
:mod:`rlkit_vllm.server`), safe across interpreters with different pins on either side.

* Messages: one request, then one reply, over a socket pair. Each is a dict of plain values
  (ints, floats, strings, lists, dicts) as UTF-8 JSON prefixed by its length: nothing that
  runs code when read (pickle would), and no tensors or numpy arrays, whose forms depend on
  the library versions on either side.
* Weights: written whole into one file in shared memory (``/dev/shm`` where there is one), each
  tensor's bytes at an aligned offset, while the engine's iteration runs (a tensor gathered
  from shards is valid only then); the request carries the file's path and a table of
  (name, dtype, shape, offset); the server maps the file and hands vLLM views of it.

Requests: ``{"op": "generate", "prompts", "seeds", "gen_kwargs"}`` -> ``{"rows", "logprobs"}``;
``{"op": "load", "path", "tensors"}`` -> ``{"tensors": n, "bytes": b}``; ``{"op": "sleep"}``,
``{"op": "wake"}``, ``{"op": "close"}`` -> ``{}``. The server's first message is
``{"ready": vllm version}``; any failure is ``{"error": one line}``.
"""

from __future__ import annotations

import mmap
import json
import os
import socket
import struct
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

HEADER = struct.Struct("<Q")
ALIGN = 64  # every tensor's offset, so a view of the mapped file can take any dtype


class Closed(ConnectionError):
    """The other side closed the socket (its process ended)."""


def send(sock: socket.socket, message: dict[str, Any]) -> None:
    data = json.dumps(message).encode()  # floats round-trip exactly; -inf log-probs as -Infinity
    sock.sendall(HEADER.pack(len(data)) + data)


def _read(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise Closed("the other side closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(sock: socket.socket) -> dict[str, Any]:
    (size,) = HEADER.unpack(_read(sock, HEADER.size))
    return json.loads(_read(sock, size))


def shm_folder(folder: str | os.PathLike | None = None) -> Path:
    """Where weight files go: ``folder``, else /dev/shm (memory), else the temporary folder."""
    if folder is not None:
        return Path(folder)
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def write_weights(path: Path, weights: Iterable[tuple[str, Any]]) -> list[tuple[str, str, list[int], int]]:
    """Each (name, tensor) into ``path`` as it comes; the table the server needs to read them."""
    import torch

    table, offset = [], 0
    with open(path, "wb") as f:
        for name, tensor in weights:
            tensor = tensor.detach().to("cpu").contiguous()
            f.write(b"\0" * (-offset % ALIGN))
            offset += -offset % ALIGN
            data = tensor.reshape(-1).view(torch.uint8).numpy()  # the raw bytes, any dtype (bf16 too)
            f.write(memoryview(data))
            table.append((name, str(tensor.dtype).removeprefix("torch."), list(tensor.shape), offset))
            offset += data.nbytes
    return table


def read_weights(path: str, table: list[tuple[str, str, list[int], int]]) -> tuple[Iterator[tuple[str, Any]], Any]:
    """The tensors of a weight file, as views of its mapping (valid until the mapping is
    closed: the second value, to close once they are loaded)."""
    import torch

    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        mapping = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY) if size else None

    def tensors():
        for name, dtype, shape, offset in table:
            dtype = getattr(torch, dtype)
            count = 1
            for n in shape:
                count *= n
            nbytes = count * torch.empty((), dtype=dtype).element_size()
            raw = torch.frombuffer(mapping, dtype=torch.uint8, count=nbytes, offset=offset) if nbytes else \
                torch.empty(0, dtype=torch.uint8)
            yield name, raw.view(dtype).reshape(shape)

    return tensors(), mapping
