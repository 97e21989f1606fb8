"""``python -m sandbox baselines``: eager and torch.compile times of every task of a benchmark,
into the shared baseline cache and one JSON line per task.

Tasks are the ``*.py`` files under ``--benchmark-root`` (a KernelBench tree: those of its
level1/, level2/, level3/ folders); each line is ``{"id": relative path, "eager_us", "compile_us",
"compile_error", "compile_s", "cached", "device", "seconds"}`` (``compile_s``: seconds of
torch.compile's untimed compile work, null when nothing was compiled; ``"retried_alone": true``
on a task timed again alone, below) or ``{"id", "task_error", "seconds"}``. Lines are appended
and flushed one by one, in the order tasks finish, so an interrupted run resumes where it stopped
(ids already in OUT are skipped); timings already in the cache cost nothing.

Each task is timed by a fresh reference worker. With ``--workers 1`` (the default) one task runs
at a time, alone on the machine. With ``--workers N``, N tasks run at once over one set of device
lanes (``sandbox.lanes``): their torch.compile work overlaps (a shared hold: tens of seconds of
host work per task), while every timed run holds its device exclusively. A task that ran out of
memory while another ran beside it is timed once more alone (nothing else running) before its
line is written: the memory may have been the others'.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

from .batch import finished_ids
from .config import SandboxConfig
from .errors import TaskError
from .lanes import wait_until
from .process import completed
from .trial_size import memory_was_full


def task_files(root: Path) -> list[Path]:
    if not root.is_dir():
        raise TaskError(f"--benchmark-root {root}: not a directory")
    # A KernelBench tree: only its level folders hold problems; anything else: every .py file.
    levels = sorted(p for p in root.glob("level*") if p.is_dir())
    files = sorted(p for base in levels or [root] for p in base.rglob("*.py")
                   if p.is_file() and not p.name.startswith("_"))
    if not files:
        raise TaskError(f"--benchmark-root {root}: no task files (*.py) under it")
    return files


def baseline_record(task: Path, task_id: str, cfg: SandboxConfig, lanes=None,
                    cancel: threading.Event | None = None) -> dict:
    from .judge import evaluate_baselines

    start = time.monotonic()
    try:
        m = evaluate_baselines(task, cfg, lanes, cancel)
    except TaskError as exc:
        return {"id": task_id, "task_error": str(exc), "seconds": time.monotonic() - start}
    compile_error = m.compile_error or (None if m.compile_us is not None or not cfg.compile_baseline
                                        else "not timed")
    return {"id": task_id, "eager_us": m.eager_us, "compile_us": m.compile_us, "compile_error": compile_error,
            "compile_s": m.stage_seconds.get("compile"), "cached": m.baseline_cached, "device": m.device,
            "seconds": time.monotonic() - start}


def ran_out_of_memory(record: dict) -> bool:
    return memory_was_full(record.get("task_error")) or memory_was_full(record.get("compile_error"))


class Turns:
    """Whose turn it is: any number of tasks beside each other, or one task alone (a retry of a
    task that ran out of memory beside others). A waiting retry goes before new tasks start."""

    def __init__(self, cancel: threading.Event):
        self.cancel = cancel
        self._cond = threading.Condition()
        self._running: set[str] = set()
        # Tasks that ran while another task ran too (at some moment of their run).
        self._accompanied: set[str] = set()
        self._alone_wanted = 0

    @contextlib.contextmanager
    def beside(self, task_id: str):
        with self._cond:
            self._wait(lambda: not self._alone_wanted)
            if self._running:
                self._accompanied |= self._running | {task_id}
            self._running.add(task_id)
        try:
            yield
        finally:
            self._leave(task_id)

    @contextlib.contextmanager
    def alone(self, task_id: str):
        with self._cond:
            self._alone_wanted += 1
        try:
            with self._cond:
                self._wait(lambda: not self._running)
                self._running.add(task_id)
            yield
        finally:
            self._leave(task_id, alone=True)

    def had_company(self, task_id: str) -> bool:
        with self._cond:
            return task_id in self._accompanied

    def _leave(self, task_id: str, alone: bool = False) -> None:
        with self._cond:
            self._alone_wanted -= alone
            self._running.discard(task_id)
            self._cond.notify_all()

    def _wait(self, ready) -> None:
        """Wait (holding the condition) until ``ready()``; Cancelled when the run is interrupted."""
        wait_until(self._cond, ready, self.cancel, "baselines run interrupted while a task waited for its turn")


def timed_record(task: Path, task_id: str, cfg: SandboxConfig, lanes, turns: Turns,
                 cancel: threading.Event) -> dict:
    """The task's record, timed beside other tasks; timed again alone when it ran out of memory
    while another task ran (whose memory it may have been)."""
    with turns.beside(task_id):
        record = baseline_record(task, task_id, cfg, lanes, cancel)
    if ran_out_of_memory(record) and turns.had_company(task_id):
        with turns.alone(task_id):
            record = dict(baseline_record(task, task_id, cfg, lanes, cancel), retried_alone=True)
    return record


def baseline_lanes(cfg: SandboxConfig, workers: int):
    """One lane per device with a slot per worker. No cores pinned: the tasks' compiles use every
    core (pinned, a lane's workers would share its ``lane_cpus``)."""
    from .lanes import DeviceLanes
    from .pool import visible_devices

    devices = list(cfg.devices or visible_devices(cfg.backend))
    return DeviceLanes(devices, build_slots=1, lane_cpus=0, lane_slots=workers)


def time_tasks(todo: list[tuple[Path, str]], cfg: SandboxConfig, workers: int) -> Iterator[dict]:
    """One record per task, as tasks finish: one at a time, or ``workers`` at once."""
    if workers <= 1:
        for task, task_id in todo:
            yield baseline_record(task, task_id, cfg)
        return
    lanes, cancel = baseline_lanes(cfg, workers), threading.Event()
    turns = Turns(cancel)
    pool = ThreadPoolExecutor(workers, thread_name_prefix="baselines")
    futures = [pool.submit(timed_record, task, task_id, cfg, lanes, turns, cancel) for task, task_id in todo]
    try:
        for future in completed(futures):
            yield future.result()
    finally:
        cancel.set()  # interrupted (or done): tasks still running end, their workers killed
        pool.shutdown(wait=True, cancel_futures=True)


def run_baselines(args: argparse.Namespace, cfg: SandboxConfig) -> int:
    from tqdm import tqdm

    if args.workers < 1:
        raise ValueError(f"--workers must be at least 1, got {args.workers}")
    root, out = Path(args.benchmark_root), Path(args.out)
    files = task_files(root)
    done = finished_ids(out)
    todo = [(p, str(p.relative_to(root))) for p in files if str(p.relative_to(root)) not in done]
    print(f"{len(files)} tasks, {len(files) - len(todo)} already in {out}, {len(todo)} to time", file=sys.stderr)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "a") as sink, tqdm(total=len(todo), unit="task", file=sys.stderr) as bar:
        for record in time_tasks(todo, cfg, args.workers):
            sink.write(json.dumps(record) + "\n")
            sink.flush()
            bar.set_postfix_str(record["id"])
            bar.update(1)
    return 0
