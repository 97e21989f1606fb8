"""A checked call's output, handed from the run worker to the reference worker in sealed shared
memory: one call at a time, never through a file or a pipe, never the other way round.

The run worker copies the output's tensors into a fresh ``memfd``, seals it (no write, grow or
shrink, by anyone, from then on) and sends the descriptor with a small JSON header over a Unix
socket that only the two workers hold. The reference worker checks the seals and the header,
maps the memory read-only and compares it with its own reference output, on its device. Nothing
travels from the reference worker to the run worker: reference outputs and regenerated inputs
stay in the reference worker's process. The header carries the nonce of the judge's latest
command to the run worker (the judge hands it to the reference worker with the check), so a
message solution code writes into the socket is a forgery.
"""
from __future__ import annotations

import fcntl
import json
import mmap
import os
import socket
import warnings
from typing import Any

import torch

from .inputs import WorkerFailure
from .measurement import ErrorKind

SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
# Bytes copied device -> host per step (bounds the staging memory of a device output).
CHUNK_BYTES = 64 << 20
# Largest header accepted (the layout of an output: a few entries per tensor).
HEADER_BYTES = 1 << 20
DTYPES = {str(d): d for d in (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.complex64,
                              torch.complex128, torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
                              torch.bool)}


class HandoverError(Exception):
    """A message on the hand-over socket that the harness did not send as sent."""


def layout(obj: Any, tensors: list) -> Any:
    """JSON description of a plain output (tensors by index into ``tensors``); anything but plain
    tensors, lists, tuples, dicts and numbers is refused (copying it could run solution code)."""
    if isinstance(obj, torch.Tensor):
        if type(obj) is not torch.Tensor:
            raise WorkerFailure(ErrorKind.MISMATCH, f"output is a {type(obj).__name__}, not a plain torch.Tensor")
        if str(obj.dtype) not in DTYPES:
            raise WorkerFailure(ErrorKind.MISMATCH, f"output has dtype {obj.dtype}, which the sandbox does not compare")
        tensors.append(obj.detach())
        return {"tensor": len(tensors) - 1}
    if type(obj) in (list, tuple):
        return {type(obj).__name__: [layout(x, tensors) for x in obj]}
    if type(obj) is dict:
        return {"dict": [[layout(k, tensors), layout(v, tensors)] for k, v in obj.items()]}
    if obj is None or type(obj) in (bool, int, float, str):
        return {"value": obj}
    raise WorkerFailure(ErrorKind.MISMATCH, f"output is a {type(obj).__name__}, not a plain list, tuple or dict")


def rebuild(desc: Any, tensors: list) -> Any:
    """The output a ``layout`` describes, with its tensors taken from ``tensors``."""
    if not isinstance(desc, dict) or len(desc) != 1:
        raise HandoverError("malformed layout")
    (kind, value), = desc.items()
    if kind == "tensor":
        return tensors[int(value)]
    if kind in ("list", "tuple"):
        items = [rebuild(x, tensors) for x in value]
        return items if kind == "list" else tuple(items)
    if kind == "dict":
        return {rebuild(k, tensors): rebuild(v, tensors) for k, v in value}
    if kind == "value" and (value is None or type(value) in (bool, int, float, str)):
        return value
    raise HandoverError(f"malformed layout entry {kind!r}")


def output_bytes(tensors: list) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def send_output(sock: socket.socket, output: Any, header: dict, limit_bytes: int) -> None:
    """Copy ``output`` into a sealed memfd and send it with ``header`` (label, seed, nonce ...)."""
    tensors: list = []
    desc = layout(output, tensors)
    total = output_bytes(tensors)
    if total > limit_bytes:
        raise WorkerFailure(ErrorKind.MISMATCH, f"the output has {total} bytes, more than the {limit_bytes} bytes "
                                                "a call may return (max_output_mb)")
    fd = os.memfd_create("sandbox-output", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, total)
        entries, offset = [], 0
        for t in tensors:
            entries.append({"dtype": str(t.dtype), "shape": list(t.shape), "offset": offset})
            offset += _write_tensor(fd, t, offset)
        try:
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
        except OSError as exc:  # EBUSY: someone holds a writable mapping of it
            raise WorkerFailure(ErrorKind.VIOLATION, f"harness_tampered: the output's shared memory could not be "
                                                     f"sealed ({exc.strerror})") from None
        message = json.dumps(dict(header, layout=desc, tensors=entries, size=total)).encode()
        socket.send_fds(sock, [message], [fd])
    finally:
        os.close(fd)


def _write_tensor(fd: int, t: torch.Tensor, offset: int) -> int:
    """Write the tensor's bytes (row-major) at ``offset``, a chunk at a time; return their count."""
    flat = t.reshape(-1)
    if not flat.is_contiguous():
        flat = flat.contiguous()
    data = flat.view(torch.uint8) if flat.numel() else flat.new_empty(0, dtype=torch.uint8)
    for start in range(0, data.numel(), CHUNK_BYTES):
        chunk = data[start:start + CHUNK_BYTES].cpu()
        view = memoryview(chunk.numpy())
        written = 0
        while written < len(view):
            written += os.pwrite(fd, view[written:], offset + start + written)
    return data.numel()


def receive_output(sock: socket.socket, nonce: str, device: torch.device) -> tuple[dict, Any]:
    """The next handed-over output: its header and the output on ``device`` (CPU: a read-only
    view of the shared memory, no copy). Raises HandoverError for anything not sent as sent."""
    message, fds, _flags, _addr = socket.recv_fds(sock, HEADER_BYTES, 4)
    try:
        if len(fds) != 1:
            raise HandoverError(f"expected one descriptor with the output, got {len(fds)}")
        header = json.loads(message)
        if not isinstance(header, dict) or header.get("nonce") != nonce:
            raise HandoverError("wrong or missing nonce")
        if fcntl.fcntl(fds[0], fcntl.F_GET_SEALS) & SEALS != SEALS:
            raise HandoverError("the output's shared memory is not sealed")
        tensors = _map_tensors(fds[0], header, device)
        return header, rebuild(header["layout"], tensors)
    except (ValueError, KeyError, TypeError, IndexError, OSError) as exc:
        raise HandoverError(f"malformed hand-over ({type(exc).__name__}: {exc})") from None
    finally:
        for fd in fds:
            os.close(fd)


def _map_tensors(fd: int, header: dict, device: torch.device) -> list:
    size = os.fstat(fd).st_size
    if size != int(header["size"]):
        raise HandoverError(f"the shared memory has {size} bytes, the header says {header['size']}")
    memory = mmap.mmap(fd, size, prot=mmap.PROT_READ) if size else None
    tensors = []
    for entry in header["tensors"]:
        dtype, shape, offset = DTYPES[entry["dtype"]], [int(n) for n in entry["shape"]], int(entry["offset"])
        count = 1
        for n in shape:
            count *= n
        nbytes = count * dtype.itemsize
        if min(shape, default=0) < 0 or offset < 0 or offset + nbytes > size:
            raise HandoverError("a tensor lies outside the shared memory")
        if nbytes == 0:
            tensors.append(torch.empty(shape, dtype=dtype, device=device))
            continue
        with warnings.catch_warnings():  # read-only memory: torch warns that the tensor is not writable
            warnings.simplefilter("ignore")
            flat = torch.frombuffer(memory, dtype=dtype, count=count, offset=offset)
        tensors.append(flat.view(shape).to(device))
    return tensors
