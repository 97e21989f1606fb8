"""The task's weights, from the reference worker to the run worker, through sealed shared memory.

The judge creates one ``memfd`` per evaluation and passes it to both workers. The reference
worker writes the Model's init inputs and state dict into it as a torch.save archive and seals it
(no write, grow or shrink from then on, by anyone); the run worker checks the seals and maps the
archive (``torch.load(mmap=True)``) instead of reading it. Nothing goes to disk, and the memory is
gone with the evaluation's last descriptor. KernelBench's big Linears (4-8 GiB of fp32 weights)
made this the reference's and the run worker's longest step: a file through torch.save and
torch.load took 14 s + 13 s for 4.3 GB on the dev CPU, this 2.5 s + 0.7 s (docs/benchmarks.md).
"""
from __future__ import annotations

import os
from typing import Any

import torch

from .files import is_sealed, seal
from .inputs import WorkerFailure
from .measurement import ErrorKind


def weights_memory() -> int:
    """A fresh memfd for one evaluation's weights (close-on-exec: it reaches only the workers it
    is passed to)."""
    return os.memfd_create("sandbox-weights", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)


class WeightsMemory:
    """The judge's descriptor of one evaluation's weights memfd, kept only until the reference
    and the run worker both hold theirs: from then on the memory lives exactly as long as the
    workers need it (each closes its descriptor once used; the run worker's mapping goes with
    the archive once ModelNew holds the weights)."""

    def __init__(self):
        self.fd: int | None = weights_memory()
        self._waiting = {"reference", "run"}

    def passed_to(self, role: str) -> None:
        self._waiting.discard(role)
        if not self._waiting:
            self.close()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def write_weights(fd: int, init_inputs: list, model: torch.nn.Module) -> None:
    """The Model's init inputs and state dict (on the CPU) into ``fd``, then sealed; ``fd`` is
    closed (the run worker's own descriptor keeps the memory until it maps it)."""
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    # Shared memory that is sealed once written needs no checksum; computing it was 3/4 of the save.
    if hasattr(torch.serialization, "set_crc32_options"):
        torch.serialization.set_crc32_options(False)
    with os.fdopen(os.dup(fd), "wb") as archive:
        torch.save({"init_inputs": init_inputs, "state_dict": state}, archive)
    seal(fd)
    os.close(fd)


def read_weights(fd: int) -> dict[str, Any]:
    """The reference worker's archive, mapped (privately, of sealed memory: nothing can change it).
    Unsealed or empty memory means the reference worker did not finish: a sandbox error. ``fd``
    is closed: solution code, imported later, finds no shared memory open in its process."""
    try:
        if not is_sealed(fd) or os.fstat(fd).st_size == 0:
            raise WorkerFailure(ErrorKind.SANDBOX_ERROR,
                                "the task's weights were not written and sealed by the reference worker")
        return torch.load(f"/proc/self/fd/{fd}", weights_only=True, mmap=True)
    finally:
        os.close(fd)
