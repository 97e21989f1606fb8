"""Device gates: one machine-wide lock per timing device, so that kernel timing never overlaps
other work on the same device.

A pool lane holds its device's gate while it times (the reference's baselines, the run worker's
timed runs with their spot checks and post-timing trials). Anything else that runs heavy work on
that device (the trainer's generation and updates) holds the same gate around it, so that a
timed run never shares the device with a training step: timing noise would otherwise become
reward noise.

    with DeviceGate(gate_key("cuda", "0")):      # the lane of CUDA_VISIBLE_DEVICES entry "0"
        ...
    gate_key_for_torch_device(torch.device("cuda:1"))   # the key a trainer on cuda:1 uses

Evaluations' other device work (reference outputs, verification, checks) meets timing on a
second lock per device, ``work_key(key)``: each command to a worker holds it shared, a timed
section exclusive (after the gate), so that timing has the device to itself against every pool
on the machine while verifications of several evaluations, and training, overlap each other.

The gate is an exclusive ``flock`` on a file named after the device under ``gate_dir()``: it
spans processes and threads (each hold opens its own file description), is released by the
kernel when its holder dies, and costs microseconds when nobody else holds it. Devices are named
as CUDA_VISIBLE_DEVICES names them (indices or UUIDs); both sides must use the same naming.
"""
from __future__ import annotations

import fcntl
import os
import re
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Optional

# Where the lock files live (one per device); the environment variable overrides the default
# so that processes with different temporary directories still meet on the same files.
GATE_DIR_ENV = "CUDA_AGENT_GATE_DIR"
# How often a cancellable wait looks at its cancel flag.
POLL_S = 0.01


def gate_dir() -> Path:
    return Path(os.environ.get(GATE_DIR_ENV) or Path(tempfile.gettempdir()) / "cuda-agent-gates")


def gate_key(backend: str, device: str) -> str:
    """The gate of a sandbox lane: ``cuda-<entry>`` per GPU, ``cpu`` for the host's timing lane."""
    if backend != "cuda":
        return "cpu"
    return "cuda-" + re.sub(r"[^A-Za-z0-9_.-]", "_", device.strip())


def work_key(key: str) -> str:
    """The device-work lock beside gate ``key`` ("+" never comes out of ``gate_key``)."""
    return key + "+work"


def gate_key_for_torch_device(device) -> str:
    """The gate a process working on the torch ``device`` must hold: its CUDA_VISIBLE_DEVICES
    entry (what the sandbox's lanes are named by), or its index when the variable is unset."""
    if getattr(device, "type", str(device)) != "cuda":
        return "cpu"
    index = device.index if device.index is not None else 0
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        entries = [e.strip() for e in listed.split(",") if e.strip()]
        if index < len(entries):
            return gate_key("cuda", entries[index])
    return gate_key("cuda", str(index))


class DeviceGate:
    """Context manager holding one device's gate; reusable, shareable by threads, and reentrant
    within a thread (an inner hold of a gate the thread already holds is free).

    ``cancelled`` (optional) makes the wait give up: it is polled every ``POLL_S`` and the wait
    raises ``GateCancelled``. Without it the wait blocks in the kernel until the gate is free.
    ``shared``: hold it together with other shared holders (never with an exclusive one); the
    turnstile still queues a shared holder behind an exclusive one that waits."""

    def __init__(self, key: str, cancelled: Optional[Callable[[], bool]] = None, shared: bool = False):
        self.key, self.cancelled, self.shared = key, cancelled, shared
        self.path = gate_dir() / f"{key}.lock"
        self._held = threading.local()
        # Seconds spent waiting for the gate, and how many holds (the gate benchmark's numbers).
        self.waited_s, self.holds = 0.0, 0

    def __enter__(self) -> "DeviceGate":
        depth = getattr(self._held, "depth", 0)
        self._held.depth = depth + 1
        if depth:
            return self  # a second flock of this process on a new descriptor would wait for itself
        try:
            self._held.fd = self._acquire()
        except BaseException:
            self._held.depth = 0
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._held.depth -= 1
        if self._held.depth == 0:
            fd, self._held.fd = self._held.fd, None
            os.close(fd)  # closing the only descriptor of this hold releases the lock

    def _acquire(self) -> int:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        # The turnstile makes the gate fair: whoever waits for the gate holds the turnstile, so
        # a holder that lets go and asks again at once queues behind the waiter instead of
        # winning the race for the lock every time (a generation loop would starve the lanes).
        turnstile = self._open(self.path.with_suffix(".turnstile"))
        try:
            self._lock(turnstile, fcntl.LOCK_EX)
            fd = self._open(self.path)
            try:
                self._lock(fd, fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX)
            except BaseException:
                os.close(fd)
                raise
        finally:
            os.close(turnstile)  # closing releases its lock
        self.waited_s += time.monotonic() - start
        self.holds += 1
        return fd

    @staticmethod
    def _open(path: Path) -> int:
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except PermissionError:  # another user's lock file: flock works on a read-only descriptor
            return os.open(path, os.O_RDONLY)

    def _lock(self, fd: int, mode: int) -> None:
        if self.cancelled is None:
            fcntl.flock(fd, mode)
            return
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if self.cancelled():
                    raise GateCancelled(f"cancelled while waiting for the device gate {self.key}") from None
                time.sleep(POLL_S)


class GateCancelled(Exception):
    """A cancellable wait for a device gate was cancelled."""
