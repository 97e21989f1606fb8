"""Worker processes of the sandbox and of data_gen's filter: start (in namespaces when root),
report pipe with nonces, exit descriptions, kill with every descendant.

Shared by ``sandbox.judge`` and ``data_gen.filter`` so that both start, watch and kill their
workers the same way.
"""
from __future__ import annotations

import functools
import json
import os
import queue
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from pathlib import Path
from typing import Iterable, Iterator

from .measurement import ErrorKind
from .placement import format_cpus
from .protocol import NONCE_COMMANDS, Command

# Seconds between looks at a worker's reports, exit and cancel flag.
POLL_S = 0.02
# Seconds between wake-ups of a thread waiting for futures (``completed``).
FUTURES_POLL_S = 0.5
# Seconds to keep reading reports after a worker exits (children may still hold the pipe).
EXIT_GRACE_S = 1.0
# Seconds to wait for a stopped worker's threads to stop (one in the kernel may take a while).
FREEZE_WAIT_S = 2.0

class WorkerProcess:
    """One ``python -m sandbox.worker`` process: its directory (bulk outputs, log), its report
    pipe, and the nonce that every genuine report must carry."""

    def __init__(self, role: str, job: dict, eval_dir: Path, env: dict[str, str], pass_fds: tuple[int, ...] = (),
                 isolate: bool = False, cancel: threading.Event | None = None):
        self.role, self.cancel = role, cancel or threading.Event()
        self.dir = eval_dir / role
        (self.dir / "tmp").mkdir(parents=True)
        read_fd, write_fd = os.pipe()
        job = dict(job, worker_dir=str(self.dir), report_fd=write_fd)
        job_path = eval_dir / f"{role}.job.json"
        job_path.write_text(json.dumps(job))
        self.log_path = eval_dir / f"{role}.log"
        env = dict(env, TMPDIR=str(self.dir / "tmp"))
        try:
            with open(self.log_path, "wb") as log:
                self.proc = subprocess.Popen(
                    worker_command("sandbox.worker", [role, str(job_path)], isolate),
                    stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=env,
                    cwd=str(self.dir), start_new_session=True, pass_fds=(*pass_fds, write_fd))
        finally:
            os.close(write_fd)
        self.reports: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._read_reports, args=(read_fd,), daemon=True)
        self._reader.start()
        self.nonce = secrets.token_hex(16)
        self._write(f"nonce {self.nonce}")

    def _read_reports(self, read_fd: int) -> None:
        with os.fdopen(read_fd, "rb") as pipe:
            for line in pipe:
                self.reports.put(line)
        self.reports.put(None)  # every writer (the worker and its children) is gone

    def wait_for(self, name: str, timeout_s: float) -> dict:
        """The payload of report ``name``; raise StageFailure on an error report, a forged
        report, an exit before reporting, or the timeout."""
        return self.wait_for_any((name,), timeout_s)[1]

    def wait_for_any(self, names: tuple[str, ...], timeout_s: float) -> tuple[str, dict]:
        """(phase, payload) of the next report, which must be one of ``names``."""
        name = " or ".join(names)
        deadline, exited_at = time.monotonic() + timeout_s, None
        while True:
            # Read before looking: a reader that had finished before an empty get() left nothing behind.
            reader_done = not self._reader.is_alive()
            try:
                line = self.reports.get(timeout=POLL_S)
            except queue.Empty:
                line = None
            if line:
                return self._accept(line, names)
            now = time.monotonic()
            if self.proc.poll() is not None:
                exited_at = exited_at or now
                # A child that inherited the pipe may keep it open: do not wait for it long.
                if reader_done or now - exited_at > EXIT_GRACE_S:
                    raise StageFailure(ErrorKind.CRASH, f"{self.role} process {describe_exit(self.proc.returncode)} "
                                                        f"before reporting {name}")
            if now > deadline:
                self.kill()
                raise StageFailure(ErrorKind.TIMEOUT, f"{self.role} stage exceeded {timeout_s:g} s")
            if self.cancel.is_set():
                self.kill()
                raise Cancelled(f"evaluation cancelled while waiting for {self.role}: {name}")

    def _accept(self, line: bytes, names: tuple[str, ...]) -> tuple[str, dict]:
        try:
            report = json.loads(line)
            genuine = isinstance(report, dict) and report.get("nonce") == self.nonce
        except ValueError:
            genuine = False
        if not genuine:
            raise StageFailure(ErrorKind.VIOLATION, f"harness_tampered: a forged report reached the judge from the "
                                                    f"{self.role} worker (wrong or missing nonce)")
        if report.get("phase") == "error":
            raise StageFailure(report["payload"]["kind"], report["payload"]["detail"])
        if report.get("phase") not in names:
            raise StageFailure(ErrorKind.SANDBOX_ERROR, f"{self.role} worker reported {report.get('phase')!r}, "
                                                        f"expected {' or '.join(names)}")
        return report["phase"], report["payload"]

    def start(self, device: str, cpus: tuple[int, ...] = ()) -> None:
        """Release a held worker onto ``device`` (a CUDA_VISIBLE_DEVICES entry) and, when
        given, its lane's host cores."""
        self._write(f"start {device or '-'} {format_cpus(cpus)}")

    def send(self, command: str, seed: int = 0, peer: str = "") -> None:
        """Send a command; all but "stop" (NONCE_COMMANDS) carry a fresh nonce, which later reports must repeat."""
        if command in NONCE_COMMANDS:
            self.nonce = secrets.token_hex(16)
            self._write(Command(command, self.nonce, seed, peer).line())
        else:
            self._write(Command("stop").line())

    def _write(self, line: str) -> None:
        try:
            self.proc.stdin.write(f"{line}\n".encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the worker is gone; wait_for reports how it ended

    def log_tail(self, chars: int) -> str:
        try:
            data = self.log_path.read_bytes()[-chars:]
        except OSError:
            return ""
        return data.decode("utf-8", errors="replace")

    def kill(self) -> None:
        """Kill the worker and everything it started, including children that made process
        groups of their own (ninja does, for each compiler it runs)."""
        kill_tree(self.proc)


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL a worker and every descendant (process groups of their own included), then reap it."""
    if proc.poll() is None:
        for pid in [proc.pid, *descendants(proc.pid)]:
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
    proc.wait()


def freeze_tree(proc: subprocess.Popen, wait_s: float = FREEZE_WAIT_S) -> list[int]:
    """SIGSTOP a live worker and every descendant (threads included: the whole process) and wait
    until every thread has stopped; the pids stopped, for ``thaw``. A namespace's init process
    is stopped too (SIGSTOP from an ancestor namespace is always delivered), and SIGKILL still
    ends a stopped process."""
    if proc.poll() is not None:
        return []
    stopped = []
    for pid in [proc.pid, *descendants(proc.pid)]:
        try:
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
        except (ProcessLookupError, PermissionError):
            pass
    # A process stops once one of its threads takes the signal, which on a busy host can be
    # milliseconds later; its other threads run until then.
    deadline = time.monotonic() + wait_s
    while not all(_all_threads_stopped(pid) for pid in stopped) and time.monotonic() < deadline:
        time.sleep(0.001)
    return stopped


def _all_threads_stopped(pid: int) -> bool:
    """Every thread of ``pid`` stopped, or gone (read from /proc; True where /proc is missing)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return True
    for task in tasks:
        try:
            state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("T", "t", "Z", "X"):
            return False
    return True


def thaw(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
        except (ProcessLookupError, PermissionError):
            pass


def descendants(root: int) -> list[int]:
    """All live descendants of ``root``, read from /proc (empty where /proc is missing)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            # The command name may contain spaces; the fields after its ')' are fixed.
            ppid = int(entry.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.parent.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


class Cancelled(Exception):
    """The caller cancelled the evaluation; its workers are gone and no result is recorded."""


class StageFailure(Exception):
    def __init__(self, kind: str, detail: str):
        super().__init__(detail)
        self.kind, self.detail = kind, detail


def describe_exit(code: int) -> str:
    # Inside namespaces a shell reports a worker killed by signal N as exit status 128 + N.
    signum = -code if code < 0 else code - 128 if 128 < code < 128 + 65 else None
    if signum is not None:
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        return f"was killed by {name}" + (f" (exit status {code})" if code > 0 else "")
    return f"exited with code {code}"


# Own PID, network, IPC and mount namespaces per worker (root only).
ISOLATION_PREFIX = ("unshare", "--pid", "--fork", "--mount-proc", "--net", "--ipc", "--")


@functools.lru_cache(maxsize=None)
def namespaces_available() -> str:
    """Empty when workers can run in their own PID and network namespaces, else why not."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "not root: workers run without namespaces"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) not found"
    try:
        probe = subprocess.run([*ISOLATION_PREFIX, "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare failed: {exc}"
    return "" if probe.returncode == 0 else f"unshare failed: {probe.stderr.decode(errors='replace').strip()[:200]}"


def worker_command(module: str, args: list[str], isolate: bool) -> list[str]:
    """``python -m MODULE ARGS``; isolated workers get their own PID namespace (they cannot see
    or reach the judge's processes, and everything they start dies with them) and an empty
    network namespace. A shell stays PID 1 there, so that signals behave as usual for Python."""
    command = [sys.executable, "-m", module, *args]
    if not isolate:
        return command
    return [*ISOLATION_PREFIX, "/bin/sh", "-c", '"$@"; exit $?', "sh", *command]


def completed(futures: Iterable[Future], poll_s: float = FUTURES_POLL_S) -> Iterator[Future]:
    """``concurrent.futures.as_completed`` whose waiting thread wakes every ``poll_s``. Python raises
    a Ctrl-C in the main thread when that thread next runs Python code; the kernel may deliver the
    signal to another thread, and then an untimed wait for futures that never finish (a task that
    hangs, timings queued behind it) would outlast the Ctrl-C for good (tests/sandbox/test_process.py)."""
    pending = set(futures)
    while pending:
        done, pending = wait(pending, timeout=poll_s, return_when=FIRST_COMPLETED)
        yield from done
