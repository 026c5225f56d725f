"""The vLLM generator's own process: ``python -m rlkit_vllm.server FD FOLDER OPTIONS``, started by
:class:`rlkit_vllm.process.ProcessGenerator` with one end of a socket pair as file descriptor
FD. It starts vLLM on the HF model in FOLDER (OPTIONS: the sampler's keyword arguments as
JSON), says ``ready``, then answers requests (:mod:`rlkit_vllm.protocol`) until ``close`` or
until the trainer's end of the socket closes (the trainer's process ended). It imports no
trainer code: it runs under whatever interpreter has vLLM.
"""

from __future__ import annotations

import json
import socket
import sys

from rlkit_vllm import protocol


def one_line(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return text if type(exc).__name__ == "RlkitError" else f"{type(exc).__name__}: {text}"


def serve(sock: socket.socket, folder: str, options: dict) -> None:
    try:
        from rlkit_vllm.checks import vllm_version
        from rlkit_vllm.sampler import VLLMSampler

        sampler = VLLMSampler(folder, **options)
    except Exception as exc:
        protocol.send(sock, {"error": one_line(exc)})
        return
    protocol.send(sock, {"ready": vllm_version()})
    broken = None  # a reload stopped half-way: nothing may sample from its weights
    while True:
        try:
            request = protocol.receive(sock)
        except protocol.Closed:
            break
        op = request.get("op")
        try:
            if op == "close":
                protocol.send(sock, {})
                break
            if broken and op in ("generate", "load"):
                raise RuntimeError(broken)
            if op == "generate":
                rows, logprobs = sampler.generate(request["prompts"], request["seeds"], request["gen_kwargs"])
                reply = {"rows": rows, "logprobs": logprobs}
            elif op == "load":
                tensors, mapping = protocol.read_weights(request["path"], request["tensors"])
                try:
                    sampler.load(tensors)
                except Exception as exc:
                    broken = f"an earlier load failed ({one_line(exc)})"
                    raise
                finally:
                    del tensors
                    if mapping is not None:
                        try:
                            mapping.close()
                        except BufferError:  # a view still alive: the mapping goes with it
                            pass
                reply = {"tensors": len(request["tensors"])}
            elif op == "sleep":
                sampler.sleep()
                reply = {}
            elif op == "wake":
                sampler.wake()
                reply = {}
            else:
                raise ValueError(f"unknown request {op!r}")
        except Exception as exc:
            reply = {"error": one_line(exc)}
        protocol.send(sock, reply)
    sampler.close()


def main(argv: list[str]) -> None:
    fd, folder, options = int(argv[0]), argv[1], json.loads(argv[2])
    sock = socket.socket(fileno=fd)
    try:
        serve(sock, folder, options)
    finally:
        sock.close()


if __name__ == "__main__":
    main(sys.argv[1:])
