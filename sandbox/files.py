"""Files that appear whole or not at all: caches shared by concurrent builds and processes, and
sealed shared memory (a memfd nobody can change once its writer sealed it: the hand-over of
checked outputs, sandbox.handover, and of the task's weights, sandbox.weights)."""
from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def replaced_atomically(target: Path, suffix: str = ".tmp") -> Iterator[Path]:
    """A private path beside ``target`` to write to. A clean exit renames it onto ``target`` in
    one step, so a concurrent reader sees the old file or the whole new one, never half of it; an
    exception removes it and leaves ``target`` as it was."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=suffix, dir=target.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# What a writer's seal forbids: any write, any change of size, any further change of the seals.
SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE


def seal(fd: int) -> None:
    """Seal the memfd ``fd`` with SEALS: from now on its bytes and size are fixed."""
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)


def is_sealed(fd: int) -> bool:
    """Whether the memfd ``fd`` carries every seal of SEALS."""
    return fcntl.fcntl(fd, fcntl.F_GET_SEALS) & SEALS == SEALS
