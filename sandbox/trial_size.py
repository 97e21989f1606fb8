"""Whether one trial of a task fits where it runs, told in bytes before anything large exists.

A worker holds one trial at a time: its inputs and two outputs (the run worker: the solution's
output and its hand-over copy; the reference worker: the reference output and the handed-over
one). The sizes come from a run of the task on the meta device (shapes only, no memory); a task
that cannot run there is measured by its real inputs instead, outputs unknown.
"""
from __future__ import annotations

import os
import re

import torch

from .errors import TASK_ERROR
from .inputs import WorkerFailure, call_task, check_inputs, seeded_inputs

GIB = 1 << 30
# How check_trial_fits's refusal begins (the free memory it compares with is what others left).
TRIAL_TOO_LARGE = "one trial of this task needs"
# What running out of memory reads like in an error: torch's CUDA allocator (OutOfMemoryError:
# "CUDA out of memory"), its CPU allocator ("can't allocate memory", errno 12), Python's
# MemoryError, and check_trial_fits's refusal.
MEMORY_FULL = re.compile("|".join(["out of memory", "OutOfMemoryError", "can't allocate memory",
                                   "Cannot allocate memory", "MemoryError", TRIAL_TOO_LARGE]), re.IGNORECASE)


def tensor_bytes(obj) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(x) for x in obj)
    if isinstance(obj, dict):
        return sum(tensor_bytes(x) for x in obj.values())
    return 0


def trial_bytes(task, device: torch.device) -> tuple[int, int | None]:
    """(bytes of one input set, bytes of one output or None when the meta run fails)."""
    try:
        with torch.device("meta"):
            inputs = seeded_inputs(task, 0)
            init_inputs = check_inputs(call_task(task, "get_init_inputs"), "get_init_inputs")
            with torch.no_grad():
                output = task.Model(*init_inputs)(*inputs)
        return tensor_bytes(inputs), tensor_bytes(output)
    except Exception:  # an op without a meta kernel, a task that moves tensors itself ...
        inputs = seeded_inputs(task, 0, device)
        return tensor_bytes(inputs), None


def room(job: dict, device: torch.device) -> tuple[int, str]:
    """Bytes one worker may use for a trial on ``device``, and what bounds it (for the message)."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        free += torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        space, what = free, f"{free} bytes free on {torch.cuda.get_device_name(device)}"
        cap = job.get("device_memory_limit_gb", 0)
        if cap > 0 and cap * GIB < space:
            space, what = int(cap * GIB), f"{int(cap * GIB)} bytes allowed (device_memory_limit_gb)"
        return space, what
    space, what = host_available(), ""
    what = f"{space} bytes of host memory available"
    cap = job.get("host_memory_limit_gb", 0)
    if cap > 0 and cap * GIB < space:
        space, what = int(cap * GIB), f"{int(cap * GIB)} bytes allowed (host_memory_limit_gb)"
    return space, what


def host_available() -> int:
    try:
        with open("/proc/meminfo") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return host_memory_bytes()


def host_memory_bytes() -> int:
    """The host's physical memory."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_trial_fits(task, job: dict, device: torch.device) -> None:
    """A task error naming the bytes when one trial cannot fit (never a crash later on)."""
    inputs, output = trial_bytes(task, device)
    needed = inputs + 2 * (output or 0)
    space, what = room(job, device)
    if needed > space:
        parts = f"{inputs} of inputs" + (f" + 2 x {output} of outputs" if output is not None else "")
        raise WorkerFailure(TASK_ERROR, f"{TRIAL_TOO_LARGE} {needed} bytes per worker ({parts}); {what}")


def memory_was_full(error: str | None) -> bool:
    """Whether an error (a task error, a compile baseline's error) says memory ran out: beside
    other work on the device, that may be the others' doing, not the task's."""
    return bool(error) and MEMORY_FULL.search(error) is not None
