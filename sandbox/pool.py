"""Many evaluations at once: the API that rollouts, data_gen and eval.py use.

    from sandbox.pool import EvalRequest, SandboxPool, evaluate_many
    with SandboxPool(cfg) as pool:
        future = pool.submit(EvalRequest("a", task, solution))    # concurrent.futures.Future
        result = await pool.evaluate(EvalRequest("b", task, other))  # from asyncio code
        pool.cancel(future)
    for result in evaluate_many(requests, cfg):                    # completion order
        result.id, result.measurement, result.task_error

How work is placed (one process per worker, fresh for every evaluation, as in ``evaluate``):

    build slots (CPU only, ``build_workers`` at once)      device lanes (one per GPU)
    ┌ build ┐ ┌ build ┐ ┌ build ┐ ...                    ┌ reference │ verify │ time ┐ next ...
      └───── run + reference workers start with the build and wait, torch imported, for a lane slot

An evaluation holds a slot of its device's lane for all of its device work (reference outputs,
baselines, verification, timing); ``lane_slots`` evaluations share a lane at once (default 1:
one), and every timed section has the device to itself (sandbox/lanes.py). Whatever a
solution leaves running dies with its workers before its slot is released. Process start-up
and builds overlap the lanes. A workspace whose linked module is already cached skips the build
worker. Every submitted request yields exactly one EvalResult, whatever fails; a broken task
is reported on its own result (``task_error``) and never stops a batch.
"""
from __future__ import annotations

import asyncio
import functools
import os
import subprocess
import sys
import threading
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable, Iterator, Optional

from .config import SandboxConfig
from .errors import TaskError
from .lanes import DeviceLanes
from .placement import available_cpus
from .measurement import ErrorKind, Measurement
from .process import completed

@dataclass(frozen=True)
class EvalRequest:
    """One (task, solution) pair to judge; ``id`` is the caller's key for the result."""

    id: str
    task: Path
    solution: Path
    # How far to go: "build", "verify" or "timing" (the full verdict; see judge.evaluate).
    stop_after: str = "timing"


@dataclass
class EvalResult:
    """Exactly one per request: a measurement, why the task could not be used, or a cancel."""

    id: str
    measurement: Optional[Measurement] = None
    task_error: Optional[str] = None
    cancelled: bool = False


def visible_devices(backend: str, environ: Optional[dict] = None, count: Optional[int] = None) -> list[str]:
    """The devices a pool may use, as CUDA_VISIBLE_DEVICES entries (indices or GPU UUIDs).

    A parent's CUDA_VISIBLE_DEVICES is respected entry by entry, so a worker given entry "3"
    sees physical GPU 3 whatever the parent saw first. The cpu backend has one timing lane."""
    if backend != "cuda":
        return ["-"]
    environ = os.environ if environ is None else environ
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        entries = [e.strip() for e in listed.split(",") if e.strip()]
        # CUDA stops at the first invalid entry (e.g. "-1"); so do we.
        valid = []
        for entry in entries:
            if entry.startswith("-"):
                break
            valid.append(entry)
        return valid
    if count is None:
        import torch

        count = torch.cuda.device_count()
    return [str(i) for i in range(count)]


@functools.lru_cache(maxsize=None)
def device_arch(device: str) -> str:
    """Compute capability ("9.0") of one device, read in a short-lived process so that the pool's
    own process never creates a CUDA context."""
    code = "import torch; print('%d.%d' % torch.cuda.get_device_capability(0))"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=device)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    if out.returncode != 0:
        raise TaskError(f"cannot read the compute capability of GPU {device}: {out.stderr.strip()[-300:]}")
    return out.stdout.strip()


class PoolClient:
    """The client API every pool engine shares, built on its submit / cancel / close."""

    def submit(self, request: EvalRequest) -> "Future[EvalResult]":
        raise NotImplementedError

    def cancel(self, future: Future) -> bool:
        raise NotImplementedError

    def close(self, cancel_pending: bool = False) -> None:
        raise NotImplementedError

    async def evaluate(self, request: EvalRequest) -> EvalResult:
        """Await one evaluation from asyncio code; cancelling the awaiting task cancels it."""
        future = self.submit(request)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            self.cancel(future)
            raise

    def map(self, requests: Iterable[EvalRequest]) -> Iterator[EvalResult]:
        """Submit every request, yield results as they finish (one per request)."""
        futures = [self.submit(r) for r in requests]
        for future in completed(futures):
            yield future.result()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close(cancel_pending=exc[0] is not None)


class SandboxPool(PoolClient):
    """Runs evaluations concurrently on this machine: CPU build slots, one lane per GPU."""

    def __init__(self, cfg: SandboxConfig, workers: Optional[int] = None, build_workers: Optional[int] = None,
                 devices: Optional[list[str]] = None):
        from .judge import check_backend

        check_backend(cfg)
        devices = list(devices or cfg.devices or visible_devices(cfg.backend))
        build_slots = build_workers or cfg.build_workers or max(1, len(available_cpus()) // 2)
        if cfg.backend == "cuda" and not cfg.cuda_arch and devices:
            # Builds run without a GPU: they are told the arch (every lane's GPU must share it).
            cfg = replace(cfg, cuda_arch=device_arch(devices[0]))
        self.cfg = cfg
        self.lanes = DeviceLanes(devices, build_slots, cfg.lane_cpus, cfg.lane_slots,
                                 harness_beside_timing=cfg.backend == "cpu" and cfg.timing.harness_beside_timing)
        self.max_in_flight = workers or cfg.pool_workers or build_slots + 2 * len(devices) + 2
        self._executor = ThreadPoolExecutor(self.max_in_flight, thread_name_prefix="sandbox-eval")
        self._cancels: dict[Future, threading.Event] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ client API

    def submit(self, request: EvalRequest) -> "Future[EvalResult]":
        """Queue one evaluation; its future resolves to exactly one EvalResult."""
        cancel = threading.Event()
        future = self._executor.submit(self._evaluate, request, cancel)
        with self._lock:
            self._cancels[future] = cancel
        future.add_done_callback(self._forget)
        return future

    def cancel(self, future: Future) -> bool:
        """Cancel a queued or running evaluation (a running one's workers are killed); its
        future then holds EvalResult(cancelled=True), or is cancelled if it never started."""
        if future.cancel():
            return True
        with self._lock:
            event = self._cancels.get(future)
        if event is None:
            return False
        event.set()
        return True

    def close(self, cancel_pending: bool = False) -> None:
        if cancel_pending:
            with self._lock:
                pending = list(self._cancels)
            for future in pending:
                self.cancel(future)
        self._executor.shutdown(wait=True, cancel_futures=cancel_pending)

    # ------------------------------------------------------------------ one evaluation

    def _forget(self, future: Future) -> None:
        with self._lock:
            self._cancels.pop(future, None)

    def _evaluate(self, request: EvalRequest, cancel: threading.Event) -> EvalResult:
        from .judge import Cancelled, evaluate

        try:
            m = evaluate(request.task, request.solution, self.cfg, lanes=self.lanes, cancel=cancel,
                         stop_after=request.stop_after)
            return EvalResult(request.id, measurement=m)
        except TaskError as exc:
            return EvalResult(request.id, task_error=str(exc))
        except Cancelled:
            return EvalResult(request.id, cancelled=True)
        except Exception as exc:  # a harness fault must still produce this request's one result
            m = Measurement(backend=self.cfg.backend, tolerance=self.cfg.tolerance)
            detail = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-2000:]}"
            return EvalResult(request.id, measurement=m.fail(ErrorKind.SANDBOX_ERROR, detail))


def make_pool(cfg: SandboxConfig, workers: Optional[int] = None):
    """The pool that ``cfg.pool_backend`` names: local processes, or Ray actors."""
    if cfg.pool_backend == "ray":
        from .ray_pool import RayPool

        return RayPool(cfg, workers=workers)
    return SandboxPool(cfg, workers=workers)


def evaluate_many(requests: Iterable[EvalRequest], cfg: SandboxConfig,
                  workers: Optional[int] = None) -> Iterator[EvalResult]:
    """Judge every request through a pool; yields one EvalResult each, in completion order."""
    with make_pool(cfg, workers) as pool:
        yield from pool.map(requests)
