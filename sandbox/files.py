"""Files that appear whole or not at all: caches shared by concurrent builds and processes."""
from __future__ import annotations

import contextlib
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
