"""CPU placement of a pool's workers: cores reserved for each device lane, the rest for builds.

Why: a lane's workers are mostly host code (CUDA start-up, the reference forward, launching the
solution's kernels). With builds (nvcc, ninja, the host compiler) on every core, a lane's work
slows down (the H200 x2 run: 3.35 s of lane time per evaluation with one GPU, 3.8 s with two)
and kernels of tens of microseconds, whose timing is launch-bound, get noisy timings. Pinning
each lane to cores of its own and the builds to the others keeps both apart.

Affinity is a placement hint, not a guard: solution code may change its own affinity.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

# Cores left to builds at the least; below this (with the lanes' cores) nothing is pinned.
MIN_BUILD_CPUS = 2


@dataclass(frozen=True)
class CpuPlan:
    """Cores per device lane and for builds; empty everywhere when nothing is pinned."""

    lanes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    builds: tuple[int, ...] = ()

    def for_lane(self, device: str) -> tuple[int, ...]:
        return self.lanes.get(device, ())

    @property
    def pinned(self) -> bool:
        return bool(self.builds)


def plan_cpus(devices: list[str], per_lane: int, available: Iterable[int]) -> tuple[CpuPlan, str]:
    """Reserve ``per_lane`` cores per lane (the highest-numbered ones) and give the builds the
    rest; (plan, "") or (an unpinned plan, why not) when there are too few cores."""
    cores = sorted(set(available))
    needed = len(devices) * per_lane
    if per_lane <= 0:
        return CpuPlan(), "lane_cpus is 0"
    if len(cores) < needed + MIN_BUILD_CPUS:
        return CpuPlan(), (f"{len(cores)} cores: fewer than {per_lane} per lane x {len(devices)} lanes "
                           f"+ {MIN_BUILD_CPUS} for builds")
    lane_cores = cores[len(cores) - needed:]
    lanes = {device: tuple(lane_cores[i * per_lane:(i + 1) * per_lane]) for i, device in enumerate(devices)}
    return CpuPlan(lanes, tuple(cores[:len(cores) - needed])), ""


def available_cpus() -> set[int]:
    """Cores this process may run on (a container's cpuset included)."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return set(range(os.cpu_count() or 1))


def format_cpus(cpus: Iterable[int]) -> str:
    """The wire form: "3,4,5" ("-" for none)."""
    text = ",".join(str(c) for c in cpus)
    return text or "-"


def parse_cpus(text: str) -> tuple[int, ...]:
    if text in ("", "-"):
        return ()
    return tuple(int(c) for c in text.split(","))


def pin_process(cpus: Iterable[int], task_dir: Optional[Path] = None) -> None:
    """Move every thread of this process onto ``cpus`` (threads started later inherit it).
    os.sched_setaffinity(0) alone would move only the calling thread."""
    cpus = set(cpus)
    if not cpus or not hasattr(os, "sched_setaffinity"):
        return
    task_dir = task_dir or Path("/proc/self/task")
    tids = [int(t.name) for t in task_dir.iterdir()] if task_dir.is_dir() else [0]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:
            pass  # a thread that just ended, or cores outside this container's cpuset
