"""The run worker's operator recorder: ``native/op_recorder.cpp``, a global ``at::RecordFunction``
callback loaded with ctypes before any solution code.

It replaces the Python recorders that used to watch the verified calls only (a dispatch mode,
~15 us per operator, and the autograd profiler): at ~0.2-0.3 us per operator it stays on for
every call of the solution's forward, timed runs included, so its state tells a solution
nothing about which calls are verified, and it sees operators run on other threads too.

The judge compiles it once per machine and software (``library_path``, cached under the sandbox
cache); the worker loads it (``OpRecorder``). What can still switch it off is closed elsewhere:
``torch.autograd._enable_record_function`` and ``_clear_callbacks`` are trapped (``guards``),
solution binaries that import ``at::enableRecordFunction`` and friends are named by ``nm``, and
a canary operator checks after each phase that the callback still sees what runs.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import threading
from collections import Counter
from pathlib import Path

import torch

from .files import replaced_atomically

SOURCE = Path(__file__).resolve().parent / "native" / "op_recorder.cpp"
# Operator namespaces that are bookkeeping, not computation (record_function ranges).
UNWATCHED_NAMESPACES = ("profiler",)
# Suffix the library gives operators it saw on a thread other than the harness's.
OTHER_THREAD = "@thread"
COMPILE_TIMEOUT_S = 300
_build_lock = threading.Lock()


class RecorderError(Exception):
    """The recorder could not be built or loaded (a harness fault, not the solution's)."""


def _compile_command(output: Path) -> list[str]:
    import torch.utils.cpp_extension as ce

    from .build import std_flag

    lib_dirs = ce.library_paths("cpu")
    return [os.environ.get("CXX", "c++"), "-O2", "-fPIC", "-shared", std_flag(),
            f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
            *[x for d in ce.include_paths("cpu") for x in ("-isystem", d)], str(SOURCE),
            *[f"-L{d}" for d in lib_dirs], *[f"-Wl,-rpath,{d}" for d in lib_dirs], "-lc10", "-ltorch_cpu",
            "-o", str(output)]


def library_path(cache_root: Path) -> Path:
    """The compiled recorder for this torch and compiler, built on first use (in the judge: trusted
    code only). Written atomically, so concurrent judges at worst compile it twice."""
    from .build import _tool_version
    from .errors import CompileError

    command = _compile_command(Path("x"))
    try:
        compiler = _tool_version(command[0])
    except CompileError as exc:
        raise RecorderError(f"the op recorder cannot be compiled: {exc}") from None
    key = hashlib.sha256(repr((SOURCE.read_bytes(), torch.__version__, compiler, command)).encode())
    path = cache_root / "op_recorder" / f"{key.hexdigest()[:24]}.so"
    with _build_lock:
        if path.exists():
            return path
        try:
            with replaced_atomically(path, ".so") as tmp:
                done = subprocess.run(_compile_command(tmp), capture_output=True, text=True,
                                      errors="replace", timeout=COMPILE_TIMEOUT_S)
                if done.returncode != 0:
                    raise RecorderError(f"compiling the op recorder failed:\n{done.stderr[-3000:]}")
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise RecorderError(f"compiling the op recorder failed: {exc}") from None
    return path


def watched_operators(allowed: frozenset[str]) -> list[str]:
    """Every operator torch has registered now ("aten::relu"), minus the allowed ones and the
    bookkeeping namespaces. Taken before the solution is imported: its own operators come later."""
    names = {name.split(".", 1)[0] for name in torch._C._dispatch_get_all_op_names()}
    return sorted(n for n in names if n.split("::", 1)[0] not in UNWATCHED_NAMESPACES
                  and not (n.startswith("aten::") and n[len("aten::"):] in allowed))


class OpRecorder:
    """ctypes handle on the loaded recorder. ``arm`` once before the first call; ``in_call``
    brackets each call of forward (and the copy of its output); ``findings`` lists what ran."""

    def __init__(self, path: str | Path, allowed: frozenset[str]):
        try:
            self._lib = ctypes.CDLL(str(path))
        except OSError as exc:
            raise RecorderError(f"loading the op recorder failed: {exc}") from None
        self._lib.rec_canary.restype = ctypes.c_longlong
        self._lib.rec_report.restype = ctypes.c_longlong
        self._lib.rec_report.argtypes = [ctypes.c_char_p, ctypes.c_longlong]
        self.watched = frozenset(watched_operators(allowed))
        if not self._lib.rec_install("\n".join(sorted(self.watched)).encode()):
            raise RecorderError("the op recorder's RecordFunction callback was not installed")
        self._probe = torch.zeros(1)
        self.armed = False

    def arm(self) -> None:
        """Count from now on; the calling thread is the harness thread."""
        self._lib.rec_arm()
        self.armed = True

    def in_call(self, on: bool) -> None:
        self._lib.rec_in_call(int(on))

    def note(self, what: str, always: bool = False) -> None:
        """Record ``what`` like an operator seen here (``always``: whatever the thread or call)."""
        self._lib.rec_note(what.encode(), int(always))

    def alive(self) -> bool:
        """Whether the callback still sees an operator run on the harness thread during a call
        (it does not once RecordFunction is switched off or the callbacks are cleared)."""
        self._lib.rec_canary(1)
        self.in_call(True)
        try:
            torch.neg(self._probe)
        finally:
            self.in_call(False)
        return self._lib.rec_canary(0) > 0

    def findings(self) -> Counter[str]:
        """Counts of what was recorded: "aten::relu", "aten::relu@thread", trap notes."""
        size = 4096
        while True:
            buf = ctypes.create_string_buffer(size)
            needed = self._lib.rec_report(buf, size)
            if needed <= size:
                break
            size = needed
        found: Counter[str] = Counter()
        for line in buf.value.decode().splitlines():
            name, count = line.rsplit("\t", 1)
            found[name] += int(count)
        return found
