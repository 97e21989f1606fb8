"""A precompiled ``torch/extension.h`` per toolchain, shared by every workspace build.

Parsing torch's headers is most of a binding file's compile: measured on one core of the 2-core
CPU machine, ``relu_add_binding.cpp`` takes 47 s at -O3 (41 s at -O0) and 23 s (16 s) with the
header precompiled. The header is built once per toolchain into the cache (about 750 MB), in
parallel with the build that first needs it; that build's own files compile without it.

Only a file that includes ``<torch/extension.h>``, or the template's ``binding_registry.h`` (which
starts by including it), before anything but comments and other self-contained headers (the
standard library's ``<vector>``, torch's own ``<ATen/...>``, ``<c10/...>``, ``<torch/...>``) gets
the header pre-included: for those, pre-including a header guarded by ``#pragma once`` changes
nothing, so the object is the one a plain compile makes. Anything else first (a ``#define``, a
``#pragma``, a header of the workspace or of another library) keeps the file on the plain path. A precompiled header the compiler finds unusable is ignored (``-Winvalid-pch``
says so in the log); one that fails to build is recorded and never retried for that toolchain.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import re
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Callable, Iterable, Optional

from .files import replaced_atomically
from .solution import TEMPLATE_DIR

HEADER_NAME = "torch_extension.h"
# Before the include of torch's extension header (directly or through the template's registry
# header, whose first line includes it): blank space, comments, and includes of headers whose
# meaning does not depend on what came before them (the standard library's, torch's own).
_GAP = r'(?:\s+|//[^\n]*|/\*.*?\*/)'
_SELF_CONTAINED = r'#[ \t]*include[ \t]*<(?:[a-z_]+|(?:ATen|c10|torch)/[A-Za-z0-9_/]+\.h)>'
FIRST_INCLUDE = re.compile(rf'\A(?:{_GAP}|{_SELF_CONTAINED})*#[ \t]*include[ \t]*(<torch/extension\.h>|"binding_registry\.h")',
                           re.S)
REGISTRY = "binding_registry.h"


def takes_torch_header(src: Path) -> bool:
    """Whether pre-including torch/extension.h leaves ``src``'s meaning unchanged (see module doc)."""
    if src.suffix not in (".cpp", ".cc"):
        return False
    try:
        match = FIRST_INCLUDE.match(src.read_text(errors="replace"))
    except OSError:
        return False
    if not match:
        return False
    # "binding_registry.h" resolves next to the file first: a workspace's own copy may start otherwise.
    return match.group(1).startswith("<") or src.parent == TEMPLATE_DIR or not (src.parent / REGISTRY).exists()


class TorchHeader:
    """The precompiled header of one toolchain under ``cache_root/build/pch/<key>/``."""

    def __init__(self, compile_command: Callable[[Path, Path], list[str]], identity: str,
                 include_dirs: tuple[str, ...], cache_root: Path):
        key = hashlib.sha256(json.dumps([identity, list(include_dirs)]).encode()).hexdigest()[:24]
        self.dir = cache_root / "build" / "pch" / key
        self.header = self.dir / HEADER_NAME
        self.compiled = self.dir / (HEADER_NAME + ".gch")
        self.failed = self.dir / "failed.txt"
        self._compile_command = compile_command

    def ready(self) -> bool:
        return self.compiled.exists()

    def wanted(self) -> bool:
        """Not built yet, and no earlier attempt failed."""
        return not self.compiled.exists() and not self.failed.exists()

    def flags(self) -> list[str]:
        """Compiler flags that pre-include the header: gcc and clang take ``X.h.gch`` for ``-include X.h``."""
        return ["-include", str(self.header), "-Winvalid-pch"]

    def build(self, run: Callable[[list[str], str], None]) -> Optional[str]:
        """Build it unless another process is (then return at once): None when it is ready, else
        why not. ``run(cmd, what)`` runs a compiler command and raises on failure."""
        from .errors import CompileError

        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / ".lock", "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return "being built by another build"
            if self.ready():
                return None
            self.header.write_text("#include <torch/extension.h>\n")
            try:
                with replaced_atomically(self.compiled, ".gch") as tmp:
                    run(self._compile_command(self.header, tmp), "precompiling torch/extension.h")
            except CompileError as exc:  # this toolchain cannot: do not pay for it again
                self.failed.write_text(str(exc))
                return f"precompiling torch/extension.h failed (see {self.failed})"
            except OSError as exc:  # a full disk, say: the next build may try again
                return f"precompiling torch/extension.h: {exc}"
        return None


class HeaderUse:
    """What one build does with its toolchain's precompiled header (``header``; None: not at
    all): which of its ``sources`` compile against it now, whether the build starts making it
    beside its own compiles, and the report's note on why none used it."""

    def __init__(self, header: Optional[TorchHeader], sources: Iterable[Path]):
        self._header = header
        self._takers = {s for s in sources if header is not None and takes_torch_header(s)}
        self._ready = header is not None and header.ready()
        self._making: Optional[Future] = None

    def flags(self, src: Path) -> tuple[str, ...]:
        return tuple(self._header.flags()) if self._ready and src in self._takers else ()

    def precompiled(self) -> list[str]:
        return sorted(s.name for s in self._takers) if self._ready else []

    def start(self, pool: Executor, run: Callable[[list[str], str], None]) -> None:
        """Build the header on ``pool`` when this build has takers for it and it is missing."""
        if self._takers and not self._ready and self._header.wanted():
            self._making = pool.submit(self._header.build, run)

    def note(self) -> str:
        """Why no file used the header ("" when one did or none could); waits for a started build."""
        if self._ready or not self._takers:
            return ""
        if self._making is None:
            return "its earlier build failed"
        return self._making.result() or "built beside this build, for the next ones"
