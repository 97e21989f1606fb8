"""Filter candidates concurrently, each in its own worker process (data_gen.filter_worker).

Synthesized programs never run in this process: each candidate is written to a file and judged
by ``python -m data_gen.filter_worker`` under a timeout, in PID and network namespaces when the
pipeline runs as root (the sandbox's isolation). Up to ``workers`` candidates are in flight at
once; workers on one GPU take turns only while timing (a file lock per device), so compilation
overlaps but runtimes are not distorted by neighbours.
"""
from __future__ import annotations

import json
import os
import queue
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

from sandbox.process import completed, describe_exit, kill_tree, namespaces_available, worker_command as sandbox_command

from .compose import Candidate
from .filter_worker import OUT_OF_DEVICE_MEMORY, RUBRICS

PROJECT_ROOT = Path(__file__).resolve().parent.parent
LOG_TAIL_CHARS = 2000


@dataclass(frozen=True)
class FilterConfig:
    # "cuda" or "cpu": where candidates run and are timed.
    device: str = "cpu"
    # Accepted eager runtime window (ms), inclusive.
    window_ms: tuple[float, float] = (0.1, 100.0)
    # Candidates judged at once (one worker process each).
    workers: int = 2
    # GPU indices to spread workers over (cuda only); empty: GPU 0.
    devices: tuple[int, ...] = ()
    # Seconds one candidate may take for all rubrics together (torch.compile included).
    timeout_s: float = 300.0
    # Seeds of the two input sets (a, b); the model's weights are drawn under init_seed.
    seeds: tuple[int, int] = (1, 2)
    init_seed: int = 0
    # Timing method (sandbox.config.TimingConfig fields).
    timing: dict = field(default_factory=lambda: {"warmup": 2, "warmup_ms": 20.0, "repeats": 5,
                                                  "flush_l2": True, "fresh_inputs": True, "cpu_threads": 1})
    # torch.compile backend and mode ("" = default mode).
    compile_backend: str = "inductor"
    compile_mode: str = ""
    # Also time the compiled model (provenance: compile_ms).
    time_compiled: bool = True
    # Tolerances: same-input repeat, "indistinguishable" outputs, compiled vs eager.
    deterministic_tol: float = 1e-5
    distinct_tol: float = 1e-2
    compile_tol: float = 1e-3
    # Skip later rubrics once one fails (saves the torch.compile of rejected candidates).
    stop_at_first_failure: bool = True
    # Run workers in their own PID and network namespaces when root (the sandbox's isolation).
    isolate: bool = True
    # Per-worker caps: largest file written (MiB) and, on cpu, address space (GiB; 0 = none).
    file_size_limit_mb: int = 1024
    host_memory_limit_gb: float = 32.0
    # Inductor's parallel-compile threads per worker (1: many workers already share the CPUs).
    inductor_compile_threads: int = 1
    # Candidates that ran out of device memory are judged once more at the end, this many at a
    # time (0: left for a rerun); big tasks sharing one GPU run it out, not any one task.
    oom_retry_workers: int = 4

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "FilterConfig":
        values = dict(values)
        for key in ("window_ms", "seeds", "devices"):
            if key in values:
                values[key] = tuple(values[key])
        if "timing" in values:
            values["timing"] = {**cls().timing, **dict(values["timing"])}
        return cls(**values)


@dataclass
class FilterResult:
    id: str
    # rubric -> {"passed": True | False | None (not run), "reason": str}
    verdicts: dict[str, dict[str, Any]]
    accepted: bool
    eager_ms: Optional[float] = None
    compile_ms: Optional[float] = None
    device: str = ""
    wall_s: float = 0.0
    # Set when the worker timed out, crashed or hit a harness error; its log tail is kept.
    worker_error: str = ""
    log_tail: str = ""
    # Seconds each rubric took inside the worker (the rest of wall_s is process start-up).
    stage_s: dict[str, float] = field(default_factory=dict)

    @property
    def first_failure(self) -> Optional[str]:
        return next((r for r in RUBRICS if self.verdicts.get(r, {}).get("passed") is False), None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def worker_command(job_path: Path, isolate: bool) -> list[str]:
    return sandbox_command("data_gen.filter_worker", [str(job_path)], isolate and namespaces_available() == "")


def job_for(cfg: FilterConfig, task_path: Path, result_path: Path, lock_path: str) -> dict[str, Any]:
    return {
        "task_path": str(task_path), "result_path": str(result_path), "device": cfg.device,
        "backend": cfg.device, "seeds": list(cfg.seeds), "init_seed": cfg.init_seed, "timing": dict(cfg.timing),
        "window_ms": list(cfg.window_ms), "compile": {"backend": cfg.compile_backend, "mode": cfg.compile_mode},
        "time_compiled": cfg.time_compiled, "stop_at_first_failure": cfg.stop_at_first_failure,
        "tolerances": {"deterministic": {"atol": cfg.deterministic_tol, "rtol": cfg.deterministic_tol},
                       "distinct": {"atol": cfg.distinct_tol, "rtol": cfg.distinct_tol},
                       "compile": {"atol": cfg.compile_tol, "rtol": cfg.compile_tol}},
        "timing_lock": lock_path, "file_size_limit_mb": cfg.file_size_limit_mb,
        "host_memory_limit_gb": cfg.host_memory_limit_gb,
    }


def worker_env(cfg: FilterConfig, gpu: Optional[int]) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(PROJECT_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    env["CUDA_VISIBLE_DEVICES"] = "" if gpu is None else str(gpu)
    env["OMP_NUM_THREADS"] = str(cfg.timing.get("cpu_threads", 1))
    env["TORCHINDUCTOR_COMPILE_THREADS"] = str(cfg.inductor_compile_threads)
    return env


def filter_one(cand: Candidate, cfg: FilterConfig, work_dir: Path, gpu: Optional[int],
               deadline: Optional[float] = None) -> Optional[FilterResult]:
    """Judge one candidate in a fresh worker process; never raises for a bad candidate. None when
    ``deadline`` (time.monotonic()) came first: the candidate is left unjudged for a later run."""
    timeout_s = cfg.timeout_s if deadline is None else min(cfg.timeout_s, deadline - time.monotonic())
    if timeout_s <= 0:
        return None
    cand_dir = work_dir / cand.id
    cand_dir.mkdir(parents=True, exist_ok=True)
    task_path, result_path = cand_dir / "task.py", cand_dir / "result.json"
    for stale in (result_path, cand_dir / "worker_error.json"):  # an earlier attempt's (a rerun, a retry)
        stale.unlink(missing_ok=True)
    task_path.write_text(cand.code)
    lock = str(work_dir / f"timing-{cfg.device}{'' if gpu is None else gpu}.lock")
    job_path = cand_dir / "job.json"
    job_path.write_text(json.dumps(job_for(cfg, task_path, result_path, lock)))
    start = time.monotonic()
    with open(cand_dir / "worker.log", "wb") as log:
        proc = subprocess.Popen(worker_command(job_path, cfg.isolate), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=str(cand_dir), env=worker_env(cfg, gpu),
                                start_new_session=True)
        error = wait_or_kill(proc, timeout_s)
    if error and deadline is not None and time.monotonic() >= deadline:
        return None  # stopped by the run's time budget, not by its own timeout
    return collect(cand.id, cand_dir, error, time.monotonic() - start)


def wait_or_kill(proc: subprocess.Popen, timeout_s: float) -> str:
    """Wait for the worker; on timeout kill it and everything it started. '' when it exited 0."""
    try:
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        return f"timeout after {timeout_s:g} s"
    return "" if code == 0 else f"worker {describe_exit(code)}"


def collect(cand_id: str, cand_dir: Path, error: str, wall_s: float) -> FilterResult:
    """Read the worker's verdicts; a rubric cut short by a timeout or crash fails with that cause."""
    try:
        data = json.loads((cand_dir / "result.json").read_text())
    except (OSError, ValueError):
        data = {"verdicts": {}}
    harness = cand_dir / "worker_error.json"
    if harness.exists():
        error = "filter harness error: " + json.loads(harness.read_text()).get("error", "")[-500:]
    verdicts = dict(data.get("verdicts", {}))
    stage = data.get("stage")
    for rubric in RUBRICS:
        if rubric in verdicts:
            continue
        if error and (rubric == stage or (stage is None and rubric == RUBRICS[0])):
            verdicts[rubric] = {"passed": False, "reason": error}
        else:
            verdicts[rubric] = {"passed": None, "reason": "not run: " + (error or "worker stopped early")}
    accepted = not error and all(v["passed"] is True for v in verdicts.values())
    log_tail = ""
    if error or not accepted:
        log_tail = (cand_dir / "worker.log").read_text(errors="replace")[-LOG_TAIL_CHARS:]
    return FilterResult(cand_id, verdicts, accepted, data.get("eager_ms"), data.get("compile_ms"),
                        data.get("device", ""), round(wall_s, 3), error, log_tail, dict(data.get("stage_s", {})))


def filter_candidates(cands: Iterable[Candidate], cfg: FilterConfig, work_dir: Path,
                      deadline: Optional[float] = None) -> Iterator[FilterResult]:
    """Judge every candidate, ``cfg.workers`` at a time; yields results as they finish. Those
    that ran out of device memory are judged again at the end, ``cfg.oom_retry_workers`` at a
    time. At ``deadline`` (time.monotonic()) candidates still in flight are stopped and, like
    those not started, yield nothing: a rerun judges them."""
    work_dir.mkdir(parents=True, exist_ok=True)
    gpus = list(cfg.devices) or [0]
    slots: "queue.Queue[Optional[int]]" = queue.Queue()
    for i in range(cfg.workers):
        slots.put(gpus[i % len(gpus)] if cfg.device == "cuda" else None)

    def run(cand: Candidate) -> Optional[FilterResult]:
        gpu = slots.get()
        try:
            return filter_one(cand, cfg, work_dir, gpu, deadline)
        finally:
            slots.put(gpu)

    cands, out_of_memory = list(cands), set()
    with ThreadPoolExecutor(max_workers=cfg.workers) as pool:
        futures = [pool.submit(run, c) for c in cands]
        for future in completed(futures):
            if deadline is not None and time.monotonic() > deadline:
                for pending in futures:
                    pending.cancel()  # only those not started yet; they yield nothing
            if future.cancelled() or future.result() is None:
                continue
            if cfg.oom_retry_workers > 0 and OUT_OF_DEVICE_MEMORY in future.result().worker_error:
                out_of_memory.add(future.result().id)
            else:
                yield future.result()
    if out_of_memory:
        again = [c for c in cands if c.id in out_of_memory]
        yield from filter_candidates(again, replace(cfg, workers=cfg.oom_retry_workers, oom_retry_workers=0),
                                     work_dir, deadline)
