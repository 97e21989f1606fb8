"""What every role of ``python -m sandbox.worker`` shares: the channel to the judge, the device
and its name, the caps a worker runs under, confinement, the arch pin and importing the solution.

Nothing from the solution is imported before this module is: the run worker fingerprints it
with the rest of its harness (``sandbox.worker.harness_modules``).
"""
from __future__ import annotations

import json
import os
import platform
import resource
import sys
from pathlib import Path
from typing import Any

import torch

from .build import summarize_compiler_output
from .config import TimingConfig
from .confine import ConfinementError, confine
from .inputs import WorkerFailure, describe_exception, load_module
from .measurement import ErrorKind
from .placement import parse_cpus
from .protocol import Command
from .trial_size import host_memory_bytes

# Bound before solution code runs (fingerprinted with the harness).
_max_memory_allocated = torch.cuda.max_memory_allocated


class Channel:
    """Reports to the judge (a pipe the judge passed in) and commands from it (stdin). The first
    stdin line is the initial nonce; each "go" command brings a new one."""

    def __init__(self, report_fd: int):
        self.report_fd = report_fd
        self.nonce = self._read_line().removeprefix("nonce ").strip()

    @staticmethod
    def _read_line() -> str:
        return sys.stdin.readline()

    def report(self, phase: str, payload: dict[str, Any]) -> None:
        line = json.dumps({"phase": phase, "nonce": self.nonce, "payload": payload}) + "\n"
        os.write(self.report_fd, line.encode())

    def wait_start(self) -> tuple[str, tuple[int, ...]] | None:
        """For a held worker: the device it may use ("-": none) and its lane's cores (none: stay
        as is), or None when told to stop."""
        words = self._read_line().split()
        if words[:1] != ["start"] or len(words) not in (2, 3):
            return None
        return words[1], parse_cpus(words[2] if len(words) == 3 else "-")

    def wait_command(self) -> Command:
        """The judge's next command; all but "stop" bring the nonce later reports carry."""
        command = Command.parse(self._read_line())
        if command.name != "stop":
            self.nonce = command.nonce
        return command


def worker_device(backend: str) -> torch.device:
    if backend == "cuda":
        if not torch.cuda.is_available():
            raise WorkerFailure(ErrorKind.SANDBOX_ERROR, "backend cuda but no CUDA device is visible")
        return torch.device("cuda", 0)
    return torch.device("cpu")


def device_name(device: torch.device) -> str:
    """Names the hardware a timing belongs to (part of the baseline cache key)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            model = next((ln.split(":", 1)[1].strip() for ln in info if ln.startswith("model name")), model)
    except OSError:
        pass
    return f"cpu:{model} x{os.cpu_count()}"


def timing_config(job: dict) -> TimingConfig:
    return TimingConfig(**job["timing"])


def device_peak_mb(device: torch.device, seen_bytes: int = 0, mapped_bytes: int = 0) -> float | None:
    """Peak device memory of this worker, MiB: the most torch allocated since the last reset,
    plus ``mapped_bytes`` of hand-over memory mapped all that time, or ``seen_bytes`` when more
    (torch's allocations plus a hand-over allocation, counted at a moment when both existed).
    Hand-over memory lies outside torch's allocator, which does not count it."""
    if device.type != "cuda":
        return None
    return max(_max_memory_allocated(device) + mapped_bytes, seen_bytes) / (1 << 20)


def max_rss_mb() -> float:
    """This process's peak resident memory (what bounded trial data is measured by)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def import_solution(solution_dir: Path):
    sys.path[:0] = [str(solution_dir / "build"), str(solution_dir)]
    try:
        module = load_module(solution_dir / "model_new.py", "model_new")
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}"
        if "Error building extension" in text:
            raise WorkerFailure(ErrorKind.COMPILE_ERROR, summarize_compiler_output(text)) from None
        raise WorkerFailure(ErrorKind.RUNTIME_ERROR, "importing model_new.py failed: " + describe_exception(exc)) from None
    model_cls = getattr(module, "ModelNew", None)
    if not isinstance(model_cls, type) or not issubclass(model_cls, torch.nn.Module):
        raise WorkerFailure(ErrorKind.INVALID_SOLUTION, "model_new.py defines no ModelNew(nn.Module) class")
    return model_cls


def cuda_arch(job: dict) -> str | None:
    if job["cuda_arch"]:
        return job["cuda_arch"]
    if job["backend"] == "cuda" and torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability(0)
        return f"{major}.{minor}"
    return None


def set_arch_env(job: dict) -> str | None:
    """Pin TORCH_CUDA_ARCH_LIST identically in the build and run workers: load_inline's flags
    depend on it, and ninja rebuilds (a minute on CUDA) when the flags differ between the two."""
    arch = cuda_arch(job)
    if arch:
        os.environ["TORCH_CUDA_ARCH_LIST"] = arch
    return arch


def apply_limits(job: dict, role: str = "") -> None:
    """Per-evaluation caps on what a worker may consume (hard limits: the solution cannot raise
    them unless it runs as root). data_gen's filter workers use them too (no role)."""
    # The run worker's outputs are files too (memfds handed to the reference worker). The
    # reference (task code, no solution) writes the task's weights for the run worker into a memfd
    # (sandbox.weights): KernelBench has 4-8 GiB Linears, so its cap is the host's memory.
    files_mb = job["file_size_limit_mb"]
    if role == "run":
        files_mb = max(files_mb, job["max_output_mb"])
    elif role == "reference":
        files_mb = max(files_mb, host_memory_bytes() >> 20)
    caps = [(resource.RLIMIT_CORE, 0), (resource.RLIMIT_FSIZE, files_mb << 20)]
    if job["backend"] == "cpu" and job["host_memory_limit_gb"] > 0:
        caps.append((resource.RLIMIT_AS, int(job["host_memory_limit_gb"] * (1 << 30))))
    for which, value in caps:
        soft, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))


def confine_if_asked(job: dict) -> None:
    """Read-only filesystem and no capabilities from here on (root workers in namespaces)."""
    if not job.get("confine"):
        return
    try:
        confine(job["writable"])
    except ConfinementError as exc:
        raise WorkerFailure(ErrorKind.SANDBOX_ERROR, f"could not confine the worker: {exc}") from None


def cap_device_memory(job: dict, device: torch.device) -> None:
    """Per-evaluation cap on what the caching allocator may hold on the GPU."""
    limit_gb = job.get("device_memory_limit_gb", 0)
    if device.type != "cuda" or limit_gb <= 0:
        return
    total = torch.cuda.get_device_properties(device).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, limit_gb * (1 << 30) / total), device)
