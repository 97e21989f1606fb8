"""The sandbox pool on Ray: the same local pool, one per evaluator actor, on any node.

    cfg = SandboxConfig(pool_backend="ray", ray_address="auto")     # or "" for a local instance
    with make_pool(cfg) as pool:                                      # sandbox.pool.make_pool
        results = list(pool.map(requests))

Each actor owns one GPU (``num_gpus=1``; Ray sets its CUDA_VISIBLE_DEVICES) or, on the cpu
backend, one CPU lane, and runs a ``SandboxPool`` on its node: builds, held workers and the
exclusive device lane work exactly as on one machine. Requests travel by value (task source and
solution files), because nodes share no filesystem; every node keeps its own build and baseline
caches. A dead actor is restarted by Ray and its calls are retried (``max_task_retries``); a call
that still fails becomes a ``sandbox_error`` result, so each request yields exactly one result.
"""
from __future__ import annotations

import os
import tempfile
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Optional

from .config import SandboxConfig
from .measurement import ErrorKind, Measurement
from .pool import EvalRequest, EvalResult, PoolClient, SandboxPool

# Ray restarts a dead actor (and retries its calls) this many times before giving up.
ACTOR_RESTARTS = 3
# Largest solution or task shipped to an actor (bytes); bigger ones are refused on the driver.
MAX_PAYLOAD_BYTES = 64 << 20


def pack_request(request: EvalRequest) -> dict:
    """A request by value: the task's source and every file of the solution."""
    solution = Path(request.solution)
    if solution.is_dir():
        files = {str(p.relative_to(solution)): p.read_bytes() for p in sorted(solution.rglob("*"))
                 if p.is_file() and p.relative_to(solution).parts[0] != "build"}
    else:
        files = {solution.name: solution.read_bytes()}
    size = sum(map(len, files.values()))
    if size > MAX_PAYLOAD_BYTES:
        raise ValueError(f"solution {solution} is {size} bytes; at most {MAX_PAYLOAD_BYTES} travel to an actor")
    return {"id": request.id, "task_name": Path(request.task).name, "task": Path(request.task).read_bytes(),
            "solution_name": solution.name, "solution_is_dir": solution.is_dir(), "files": files,
            "stop_after": request.stop_after}


def unpack_request(payload: dict, root: Path) -> EvalRequest:
    """Write a packed request under ``root`` (paths cannot leave it) and point at the copies."""
    task = root / "task" / Path(payload["task_name"]).name
    task.parent.mkdir(parents=True)
    task.write_bytes(payload["task"])
    base = root / "solution"
    for rel, data in payload["files"].items():
        target = (base / rel).resolve()
        if not target.is_relative_to(base.resolve()):
            raise ValueError(f"solution file {rel!r} points outside the solution")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    solution = base if payload["solution_is_dir"] else base / Path(payload["solution_name"]).name
    return EvalRequest(payload["id"], task, solution, payload.get("stop_after", "timing"))


class EvaluatorActor:
    """Runs on a Ray worker: a local SandboxPool for the GPU (or CPU lane) Ray gave it."""

    def __init__(self, cfg_values: dict, in_flight: int):
        # lane_cpus=0: actors sharing a node would all reserve the same highest-numbered cores.
        self.cfg = SandboxConfig.from_dict(dict(cfg_values, pool_backend="local", devices=(), lane_cpus=0))
        self.pool = SandboxPool(self.cfg, workers=in_flight)

    def node(self) -> dict:
        return {"pid": os.getpid(), "devices": self.pool.lanes.devices}

    def evaluate(self, payload: dict) -> dict:
        with tempfile.TemporaryDirectory(prefix="cuda-agent-ray-") as tmp:
            result = self.pool.submit(unpack_request(payload, Path(tmp))).result()
        m = result.measurement
        return {"id": result.id, "measurement": m.to_dict() if m else None, "task_error": result.task_error,
                "cancelled": result.cancelled}


class RayPool(PoolClient):
    """Same client API as SandboxPool (submit, evaluate, cancel, map, close), on Ray actors."""

    def __init__(self, cfg: SandboxConfig, workers: Optional[int] = None):
        import ray

        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            ray.init(address=cfg.ray_address or None, include_dashboard=False, log_to_driver=False)
        self.cfg = cfg
        gpu = cfg.backend == "cuda"
        resources = ray.cluster_resources()
        count = cfg.ray_actors or max(1, int(resources.get("GPU", 0)) if gpu else int(resources.get("CPU", 2)) // 2)
        # Evaluations per actor at once: enough to keep its builds and held workers busy.
        per_actor = workers or cfg.pool_workers or 4
        actor_cls = ray.remote(EvaluatorActor).options(
            num_gpus=1 if gpu else 0, num_cpus=1, max_restarts=ACTOR_RESTARTS, max_task_retries=ACTOR_RESTARTS,
            max_concurrency=per_actor)
        self.actors = [actor_cls.remote(cfg.to_dict(), per_actor) for _ in range(count)]
        self._load = [0] * count
        self._refs: dict[Future, object] = {}
        self._lock = threading.Lock()

    def submit(self, request: EvalRequest) -> "Future[EvalResult]":
        outer: Future = Future()
        outer.set_running_or_notify_cancel()
        try:
            payload = pack_request(request)
        except (OSError, ValueError) as exc:
            m = Measurement(backend=self.cfg.backend).fail(ErrorKind.INVALID_SOLUTION, str(exc))
            outer.set_result(EvalResult(request.id, measurement=m))
            return outer
        with self._lock:
            index = min(range(len(self.actors)), key=self._load.__getitem__)
            self._load[index] += 1
        ref = self.actors[index].evaluate.remote(payload)
        with self._lock:
            self._refs[outer] = ref
        ref.future().add_done_callback(lambda inner: self._settle(outer, inner, request.id, index))
        return outer

    def _settle(self, outer: Future, inner: Future, request_id: str, index: int) -> None:
        with self._lock:
            self._load[index] -= 1
            self._refs.pop(outer, None)
        try:
            data = inner.result()
            m = Measurement.from_dict(data["measurement"]) if data["measurement"] else None
            result = EvalResult(request_id, measurement=m, task_error=data["task_error"],
                                cancelled=data["cancelled"])
        except Exception as exc:  # actor gone for good, or the call was cancelled
            cancelled = type(exc).__name__ == "TaskCancelledError"
            m = None if cancelled else Measurement(backend=self.cfg.backend).fail(
                ErrorKind.SANDBOX_ERROR, f"ray actor call failed: {type(exc).__name__}: {exc}")
            result = EvalResult(request_id, measurement=m, cancelled=cancelled)
        outer.set_result(result)

    def cancel(self, future: Future) -> bool:
        import ray

        with self._lock:
            ref = self._refs.get(future)
        if ref is None:
            return False
        ray.cancel(ref)
        return True

    def close(self, cancel_pending: bool = False) -> None:
        import ray

        if cancel_pending:
            for future in list(self._refs):
                self.cancel(future)
        for actor in self.actors:
            ray.kill(actor)
        if self._owns_ray:
            ray.shutdown()
