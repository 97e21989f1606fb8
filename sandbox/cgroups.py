"""Per-worker cgroups: caps on processes and memory that also bind uid 0.

``RLIMIT_NPROC`` does not bind root, and ``RLIMIT_AS`` cannot be used with CUDA (the driver
reserves terabytes of address space), so as root the judge puts each solution worker in a
cgroup of its own: ``pids.max`` stops fork and thread bombs, the memory limit stops host memory
exhaustion on every backend. The judge creates the cgroups; the worker joins them first thing
(writing "0" moves the writer, whatever PID namespace it is in), so every process it starts is
counted. Best effort: where the cgroup tree is not writable (not root, a read-only
/sys/fs/cgroup, cgroup v2 without delegated controllers) no cap is applied and the
measurement's ``isolation`` field says so.
"""
from __future__ import annotations

import functools
import os
import secrets
import subprocess
import time
from pathlib import Path
from typing import Optional

CGROUP_ROOT = Path("/sys/fs/cgroup")


def own_cgroup_paths(proc_cgroup: Optional[str] = None) -> dict[str, str]:
    """controller -> this process's cgroup path, from /proc/self/cgroup ("" key: cgroup v2)."""
    text = proc_cgroup if proc_cgroup is not None else Path("/proc/self/cgroup").read_text()
    paths = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                paths[controller] = parts[2]
    return paths


def parent_dirs(root: Path = CGROUP_ROOT, proc_cgroup: Optional[str] = None) -> dict[str, Path]:
    """Where worker cgroups for "pids" and "memory" can be made (v1 hierarchies, else v2)."""
    own = own_cgroup_paths(proc_cgroup)
    found = {}
    for controller in ("pids", "memory"):
        v1 = root / controller
        if controller in own and (v1 / "cgroup.procs").exists():
            found[controller] = v1 / own[controller].lstrip("/")
    if not found and "" in own and (root / "cgroup.controllers").exists():
        parent = root / own[""].lstrip("/")
        delegated = (parent / "cgroup.subtree_control").read_text().split() if parent.is_dir() else []
        found.update({c: parent for c in ("pids", "memory") if c in delegated})
    return found


class WorkerCgroup:
    """The cgroups of one worker: create, let the worker join, remove."""

    def __init__(self, dirs: list[Path]):
        self.dirs = dirs

    @classmethod
    def create(cls, max_processes: int, memory_bytes: int) -> tuple[Optional["WorkerCgroup"], str]:
        """The worker's cgroups, or None and why not."""
        if os.geteuid() != 0:
            return None, "not root"
        why_not = joinable()
        if why_not:
            return None, why_not
        parents = parent_dirs()
        wanted = {"pids": ("pids.max", max_processes), "memory": ("memory.max", memory_bytes)}
        name = f"cuda-agent-{os.getpid()}-{secrets.token_hex(4)}"
        made: list[Path] = []
        try:
            for controller, (v2_file, value) in wanted.items():
                if controller not in parents or value <= 0:
                    continue
                directory = parents[controller] / name
                if directory not in made:
                    directory.mkdir()
                    made.append(directory)
                limit_file = directory / v2_file
                if controller == "memory" and not limit_file.exists():
                    limit_file = directory / "memory.limit_in_bytes"  # cgroup v1
                limit_file.write_text(str(value))
        except OSError as exc:
            WorkerCgroup(made).remove()
            return None, f"cannot create cgroups: {exc}"
        if not made:
            return None, "no writable pids/memory cgroup controller"
        return cls(made), ""

    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def remove(self, wait_s: float = 2.0) -> None:
        """Remove the cgroups once their (killed) processes are gone."""
        deadline = time.monotonic() + wait_s
        for directory in self.dirs:
            while directory.exists():
                try:
                    directory.rmdir()
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.02)


@functools.lru_cache(maxsize=None)
def joinable() -> str:
    """Empty when a child process can join a fresh cgroup here, else why not. Checked once per
    process: a host where workers could not join would otherwise fail every evaluation."""
    try:
        parents = parent_dirs()
    except OSError as exc:
        return f"cgroups unreadable: {exc}"
    if "pids" not in parents:
        return "no writable pids cgroup controller"
    probe = parents["pids"] / f"cuda-agent-probe-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        probe.mkdir()
    except OSError as exc:
        return f"cannot create cgroups: {exc}"
    try:
        joined = subprocess.run(["/bin/sh", "-c", f'echo 0 > "{probe}/cgroup.procs"'], capture_output=True,
                                text=True, timeout=10)
        return "" if joined.returncode == 0 else f"cannot join cgroups: {joined.stderr.strip()[:200]}"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot join cgroups: {exc}"
    finally:
        WorkerCgroup([probe]).remove()


def join(procs_files: list[str]) -> None:
    """Move the calling process into the given cgroups (its future children follow)."""
    for path in procs_files:
        with open(path, "w") as fh:
            fh.write("0")
