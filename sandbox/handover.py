"""A checked call's output, handed from the run worker to the reference worker in shared memory:
one call at a time, never through a file or a pipe, never the other way round.

Two channels, chosen in one place (``device_channel``): on the CUDA backend, device memory
(``sandbox.device_memory``: a fresh harness-owned allocation, shared by file descriptor, copied
device to device by the receiver); on the CPU backend, or where device sharing does not work,
sealed host memory:

The run worker copies the output's tensors into a fresh ``memfd``, seals it (no write, grow or
shrink, by anyone, from then on) and sends the descriptor with a small JSON header over a Unix
socket that only the two workers hold. The reference worker checks the seals and the header,
maps the memory read-only and compares it with its own reference output, on its device. Nothing
travels from the reference worker to the run worker: reference outputs and regenerated inputs
stay in the reference worker's process. The header carries the nonce of the judge's latest
command to the run worker (the judge hands it to the reference worker with the check), so a
message solution code writes into the socket is a forgery.

The device channel cannot be sealed: the harness copies the output into fresh memory,
synchronises the whole device before sending and drops its own reference to the output; the
judge stops the run worker's process tree before the reference worker maps the memory. The
reference worker compares in place (no private copy of the whole output: one trial's inputs and
two outputs per worker), fingerprinting every chunk on arrival under a secret mix and comparing
only private copies of chunks that still match it, then re-checks every chunk after the
comparison (docs/sandbox.md, "Trial data").
"""
from __future__ import annotations

import contextlib
import json
import mmap
import os
import socket
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

from .compare import chunks
from .device_memory import DeviceBuffer, DeviceMemoryError, granularity, unavailable
from .files import is_sealed, seal
from .inputs import WorkerFailure, device_fingerprint, secret_mix
from .measurement import ErrorKind

# Bytes copied device -> host per step (bounds the staging memory of a device output).
CHUNK_BYTES = 64 << 20
# Largest header accepted (the layout of an output: a few entries per tensor).
HEADER_BYTES = 1 << 20
DTYPES = {str(d): d for d in (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.complex64,
                              torch.complex128, torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
                              torch.bool)}
# Byte alignment of each tensor in a device hand-over (the receiver views it with its dtype).
DEVICE_ALIGN = 256
# Channels: what the header's "channel" names and the judge counts.
HOST, DEVICE = "host", "device"
# Bound before solution code runs (the module is fingerprinted with the harness).
_synchronize = torch.cuda.synchronize


def device_channel(backend: str, enabled: bool) -> str:
    """Why checked outputs cannot travel in device memory here ("" when they can): the one place
    that chooses the channel. CPU backend, switched off, or the driver refuses: sealed host memory."""
    if backend != "cuda":
        return "the backend is not cuda"
    if not enabled:
        return "switched off (device_handover: false)"
    return unavailable(0)


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


def send_output(sock: socket.socket, output: Any, header: dict, limit_bytes: int,
                on_device: bool = False) -> DeviceBuffer | None:
    """Copy ``output`` into fresh shared memory and send it with ``header`` (label, seed, nonce ...):
    device memory when ``on_device`` and every tensor is on the GPU (returned: the caller frees it
    once the check is acknowledged), else a sealed memfd (None)."""
    tensors: list = []
    desc = layout(output, tensors)
    total = output_bytes(tensors)
    if total > limit_bytes:
        raise WorkerFailure(ErrorKind.MISMATCH, f"the output has {total} bytes, more than the {limit_bytes} bytes "
                                                "a call may return (max_output_mb)")
    if on_device and total and all(t.is_cuda for t in tensors):
        entries = _device_entries(tensors)
        extent = entries[-1]["offset"] + output_bytes(tensors[-1:])
        try:
            buffer = DeviceBuffer.create(extent, torch.cuda.current_device())
        except (DeviceMemoryError, RuntimeError) as exc:  # out of device memory, say: this call goes through the host
            print(f"sandbox: device hand-over unavailable for this call ({exc}); using host memory", flush=True)
        else:
            return _send_on_device(sock, buffer, tensors, entries, dict(header, layout=desc))
    _send_on_host(sock, tensors, dict(header, layout=desc), total)
    return None


def _device_entries(tensors: list) -> list[dict]:
    """Where each tensor lies in a device hand-over: at its dtype's alignment, in order."""
    entries, offset = [], 0
    for t in tensors:
        offset = -(-offset // DEVICE_ALIGN) * DEVICE_ALIGN
        entries.append({"dtype": str(t.dtype), "shape": list(t.shape), "offset": offset})
        offset += t.numel() * t.element_size()
    return entries


def _send_on_device(sock: socket.socket, buffer: DeviceBuffer, tensors: list, entries: list[dict],
                    header: dict) -> DeviceBuffer:
    """Copy the tensors into ``buffer`` at ``entries``, wait for the whole device (the solution's
    streams too), then send a descriptor of it."""
    try:
        for t, entry in zip(tensors, entries):
            data = _flat_bytes(t)
            buffer.tensor[entry["offset"]:entry["offset"] + data.numel()].copy_(data)
        _synchronize()
        fd = buffer.export()
        try:
            message = json.dumps(dict(header, channel=DEVICE, tensors=entries, size=buffer.size)).encode()
            socket.send_fds(sock, [message], [fd])
        finally:
            os.close(fd)
    except BaseException:
        buffer.close()
        raise
    return buffer


def _send_on_host(sock: socket.socket, tensors: list, header: dict, total: int) -> None:
    fd = os.memfd_create("sandbox-output", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, total)
        entries, offset = [], 0
        for t in tensors:
            entries.append({"dtype": str(t.dtype), "shape": list(t.shape), "offset": offset})
            offset += _write_tensor(fd, t, offset)
        try:
            seal(fd)
        except OSError as exc:  # EBUSY: someone holds a writable mapping of it
            raise WorkerFailure(ErrorKind.VIOLATION, f"harness_tampered: the output's shared memory could not be "
                                                     f"sealed ({exc.strerror})") from None
        message = json.dumps(dict(header, channel=HOST, tensors=entries, size=total)).encode()
        socket.send_fds(sock, [message], [fd])
    finally:
        os.close(fd)


def _flat_bytes(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes, row-major, as one uint8 vector."""
    flat = t.reshape(-1)
    if not flat.is_contiguous():
        flat = flat.contiguous()
    return flat.view(torch.uint8) if flat.numel() else flat.new_empty(0, dtype=torch.uint8)


def _write_tensor(fd: int, t: torch.Tensor, offset: int) -> int:
    """Write the tensor's bytes (row-major) at ``offset``, a chunk at a time; return their count."""
    data = _flat_bytes(t)
    for start in range(0, data.numel(), CHUNK_BYTES):
        chunk = data[start:start + CHUNK_BYTES].cpu()
        view = memoryview(chunk.numpy())
        written = 0
        while written < len(view):
            written += os.pwrite(fd, view[written:], offset + start + written)
    return data.numel()


# Why a device hand-over is refused after it arrived (the judge reports it as harness tampering).
CHANGED = "the output's device memory changed after it was handed over"


@dataclass
class Handed:
    """A received output. Host channel: sealed memory, nothing more to watch. Device channel:
    ``output`` views the run worker's shared allocation (``shared``, mapped until ``close``),
    with no private copy of it; on arrival each comparison chunk (``compare.chunks``) was
    fingerprinted under a mix drawn here, which the run worker never sees. ``read`` gives the
    comparison a private copy of one chunk and refuses it unless it still has its arrival
    fingerprint; ``unchanged`` re-checks every chunk after the comparison."""

    header: dict
    output: Any
    shared: DeviceBuffer | None = None
    mix: tuple = ()
    # Device channel: (chunk view, fingerprint on arrival), and their index by (address, bytes).
    arrived: list = field(default_factory=list)
    where: dict = field(default_factory=dict)

    def note_arrival(self, tensors: list) -> None:
        self.mix = secret_mix()
        for t in tensors:
            for chunk in chunks(t):
                if chunk.numel():
                    self.where[_place(chunk)] = len(self.arrived)
                    self.arrived.append((chunk, device_fingerprint(chunk, self.mix)))

    def read(self, chunk: torch.Tensor) -> torch.Tensor:
        """The comparison's copy of ``chunk`` (``compare_outputs``' read): device channel, a
        private copy that still has the chunk's arrival fingerprint, else HandoverError."""
        if self.shared is None or not chunk.numel():
            return chunk
        index = self.where.get(_place(chunk))
        copy = chunk.clone()
        if index is None or device_fingerprint(copy, self.mix) != self.arrived[index][1]:
            raise HandoverError(CHANGED)
        return copy

    def unchanged(self) -> bool:
        return all(device_fingerprint(chunk, self.mix) == fingerprint for chunk, fingerprint in self.arrived)

    def mapped_bytes(self) -> int:
        return self.shared.size if self.shared is not None else 0

    def close(self) -> None:
        shared, self.shared = self.shared, None
        self.output, self.arrived, self.where = None, [], {}  # no view may outlive the mapping
        if shared is not None:
            shared.close()


def _place(chunk: torch.Tensor) -> tuple[int, int]:
    return chunk.data_ptr(), chunk.numel() * chunk.element_size()


def receive_output(sock: socket.socket, nonce: str, device: torch.device) -> tuple[dict, Any]:
    """The next handed-over output on the host channel: its header and the output on ``device``
    (CPU: a read-only view of the shared memory, no copy). Raises HandoverError for anything not
    sent as sent, and for a device hand-over (its views end with the mapping: ``receive_handover``)."""
    handed = receive_handover(sock, nonce, device)
    on_device = handed.shared is not None
    header, output = handed.header, handed.output
    handed.close()
    if on_device:
        raise HandoverError("receive_output takes host hand-overs only")
    return header, output


def receive_handover(sock: socket.socket, nonce: str, device: torch.device) -> Handed:
    """The next hand-over, on either channel (``Handed.close`` it). Raises HandoverError for
    anything not sent as the harness sends it."""
    message, fds, _flags, _addr = socket.recv_fds(sock, HEADER_BYTES, 4)
    try:
        if len(fds) != 1:
            raise HandoverError(f"expected one descriptor with the output, got {len(fds)}")
        header = json.loads(message)
        if not isinstance(header, dict) or header.get("nonce") != nonce:
            raise HandoverError("wrong or missing nonce")
        if header.get("channel") == DEVICE:
            return _open_on_device(fds[0], header, device)
        if not is_sealed(fds[0]):
            raise HandoverError("the output's shared memory is not sealed")
        tensors = _map_tensors(fds[0], header, device)
        return Handed(header, rebuild(header["layout"], tensors))
    except (ValueError, KeyError, TypeError, IndexError, OSError) as exc:
        raise HandoverError(f"malformed hand-over ({type(exc).__name__}: {exc})") from None
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):  # an importing driver may have closed it already
                os.close(fd)


def _entry(entry: dict, size: int) -> tuple[torch.dtype, list[int], int, int]:
    """(dtype, shape, offset, bytes) of one tensor entry, which must lie inside ``size`` bytes."""
    dtype, shape, offset = DTYPES[entry["dtype"]], [int(n) for n in entry["shape"]], int(entry["offset"])
    count = 1
    for n in shape:
        count *= n
    nbytes = count * dtype.itemsize
    if min(shape, default=0) < 0 or offset < 0 or offset + nbytes > size:
        raise HandoverError("a tensor lies outside the shared memory")
    return dtype, shape, offset, nbytes


def _open_on_device(fd: int, header: dict, device: torch.device) -> Handed:
    """Map the run worker's allocation and view the tensors in it (each at its dtype's
    alignment); fingerprint them at once. The announced size must be exactly what the harness
    allocates for the layout (cuMemMap refuses a size beyond the allocation)."""
    if device.type != "cuda":
        raise HandoverError("a device hand-over reached a worker without a GPU")
    size, index = int(header["size"]), device.index or 0
    entries = [_entry(e, size) for e in header["tensors"]]
    if not entries:
        raise HandoverError("a device hand-over without tensors")
    step = granularity(index)
    extent = entries[-1][2] + entries[-1][3]
    if size != max(step, -(-extent // step) * step):
        raise HandoverError(f"the header announces {size} bytes for a layout of {extent}")
    try:
        shared = DeviceBuffer.open(fd, size, index)
    except (DeviceMemoryError, RuntimeError) as exc:
        raise HandoverError(f"the output's device memory could not be mapped ({exc})") from None
    try:
        tensors = []
        for dtype, shape, offset, nbytes in entries:
            if offset % max(dtype.itemsize, 1):
                raise HandoverError("a tensor is not aligned to its dtype in the shared memory")
            part = shared.tensor[offset:offset + nbytes]
            tensors.append(part.view(dtype).view(shape) if nbytes else torch.empty(shape, dtype=dtype, device=device))
        handed = Handed(header, rebuild(header["layout"], tensors), shared)
        handed.note_arrival(tensors)
        return handed
    except BaseException:
        shared.close()
        raise


def _map_tensors(fd: int, header: dict, device: torch.device) -> list:
    size = os.fstat(fd).st_size
    if size != int(header["size"]):
        raise HandoverError(f"the shared memory has {size} bytes, the header says {header['size']}")
    memory = mmap.mmap(fd, size, prot=mmap.PROT_READ) if size else None
    tensors = []
    for entry in header["tensors"]:
        dtype, shape, offset, nbytes = _entry(entry, size)
        if nbytes == 0:
            tensors.append(torch.empty(shape, dtype=dtype, device=device))
            continue
        with warnings.catch_warnings():  # read-only memory: torch warns that the tensor is not writable
            warnings.simplefilter("ignore")
            flat = torch.frombuffer(memory, dtype=dtype, count=nbytes // dtype.itemsize, offset=offset)
        tensors.append(flat.view(shape).to(device))
    return tensors
