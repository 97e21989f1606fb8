"""The judge: runs one evaluation across worker processes and fills a Measurement.

    reference worker  ──(weights)──────────────────▶  run worker (solution code)
          ▲ seeds of checked calls                        │ outputs of checked calls + seeds
          │ reference outputs (a pipe, never a file)      │
          └──────────────▶  judge: compare, reward  ◀─────┘

The reference worker starts concurrently with the build and stays until the end: after the
solution's verified trials, and again after its timed runs (spot checks) and post trials, the
judge sends it the seeds of the calls to check and gets their inputs and reference outputs. The
judge compares outputs itself, in this process, which no solution code ever runs in. Each stage
has its own timeout; a worker that dies, hangs or exits early fails the evaluation with a typed
error. In a pool, each command the judge gives a worker (and torch.compile's compile work for a
baseline) holds the device shared with other evaluations, each timed section exclusively
(``sandbox.lanes``).
"""
from __future__ import annotations

import functools
import os
import secrets
import socket
import shutil
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from .backend import require_backend
from .cgroups import WorkerCgroup
from .checks import TIMED_RUN, TRIAL, CallChecks
from .lanes import LaneSession, SoloLanes
from .process import (Cancelled, StageFailure, WorkerProcess, freeze_tree,  # noqa: F401 (Cancelled: pool's)
                      namespaces_available, thaw)
from .config import SandboxConfig
from .errors import TASK_ERROR, SolutionError, TaskError
from .measurement import ErrorKind, Measurement, TimingStats
from .recorder import RecorderError, library_path
from .solution import materialise, read_solution
from .task import load_task_source
from .weights import WeightsMemory
# Compiles the operator recorder off the evaluation's thread (once per machine and software).
RECORDER_BUILDS = ThreadPoolExecutor(1, thread_name_prefix="op-recorder-build")


class HandoverSockets:
    """The Unix socket pair over which the run worker hands checked outputs to the reference
    worker (``sandbox.handover``): one end each; the judge closes its copies once they started."""

    def __init__(self):
        self.ends = dict(zip(("run", "reference"), socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)))

    def fd(self, role: str) -> int:
        return self.ends[role].fileno()

    def close(self, role: str | None = None) -> None:
        for name in [role] if role else list(self.ends):
            end = self.ends.pop(name, None)
            if end is not None:
                end.close()


# What isolated workers get (Measurement.isolation); solution roles are also confined (confine.py).
ISOLATED = "pid+net+ipc+mount namespaces; solution code: read-only filesystem, no capabilities"
# How far an evaluation may be asked to go (evaluate's stop_after), in order.
STAGES = ("build", "verify", "timing")
# Roles that run solution code.
SOLUTION_ROLES = ("build", "run")


def check_backend(cfg: SandboxConfig) -> None:
    """Fail fast, with one line, when the requested backend cannot run here."""
    require_backend(cfg.backend, "--backend cpu")


def worker_env(cfg: SandboxConfig, role: str, solution_key: str) -> dict[str, str]:
    env = dict(os.environ)
    project_root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = project_root + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    env["CUDA_VISIBLE_DEVICES"] = str(cfg.device_index) if cfg.backend == "cuda" else ""
    env["OMP_NUM_THREADS"] = str(cfg.timing.cpu_threads)
    # Idle OpenMP threads sleep instead of spinning: no false "background work", steadier timings.
    env["OMP_WAIT_POLICY"] = "PASSIVE"
    env["MAX_JOBS"] = str(cfg.build_jobs)
    if role in ("reference", "run"):
        # Keep freed host memory in the process instead of returning it to the OS: otherwise
        # every fresh input set re-faults its pages and CPU timings turn bimodal (measured:
        # eager relu_add p25/p75 3.9/19.1 ms without, 2.9/3.2 ms with).
        env["MALLOC_MMAP_THRESHOLD_"] = str(32 * 1024 * 1024)
        env["MALLOC_TRIM_THRESHOLD_"] = str(16 * 1024 ** 3)
    if role == "reference":
        # torch.compile's baselines share inductor's cache (generated kernels, FX graphs and,
        # through reference_role.share_inductor_headers, its precompiled headers) across
        # evaluations instead of starting cold in the worker's own TMPDIR.
        env["TORCHINDUCTOR_CACHE_DIR"] = str(cfg.cache_root / "inductor")
    if role in SOLUTION_ROLES:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        # One load_inline directory per solution source: identical solutions reuse one build,
        # different ones never contend for the same extension name.
        env["TORCH_EXTENSIONS_DIR"] = str(cfg.cache_root / "torch_extensions" / cfg.backend / solution_key)
    return env


def evaluate(task_path: str | Path, solution_path: str | Path, cfg: SandboxConfig, lanes=None,
             cancel: threading.Event | None = None, stop_after: str = "timing") -> Measurement:
    """Judge one solution. Raises TaskError for an unusable task; everything else is a Measurement.
    ``lanes`` (sandbox.pool) places the stages when many evaluations share the machine.
    ``stop_after``: "build" (compile feedback only: no reference, no GPU), "verify" (correctness,
    no baselines timed, no timing) or "timing" (the full verdict, the only one a reward needs)."""
    if stop_after not in STAGES:
        raise ValueError(f"stop_after must be one of {STAGES}, got {stop_after!r}")
    task_source = load_task_source(task_path)
    check_backend(cfg)
    m = Measurement(backend=cfg.backend, tolerance=cfg.tolerance)
    try:
        solution = read_solution(solution_path)
    except SolutionError as exc:
        return m.fail(ErrorKind.INVALID_SOLUTION, str(exc))  # nothing ran: stopped_after "none", no trials
    m.solution_form, m.stopped_after = solution.form, stop_after
    m.num_trials = cfg.num_correct_trials + (cfg.post_timing_trials if stop_after == "timing" else 0)
    eval_dir = Path(tempfile.mkdtemp(prefix="cuda-agent-eval-"))
    try:
        materialise(solution, task_source, eval_dir / "solution")
        _Evaluation(cfg, m, eval_dir, solution.key, lanes or SoloLanes(cfg), cancel, stop_after).run()
    finally:
        shutil.rmtree(eval_dir, ignore_errors=True)
    return m


def evaluate_baselines(task_path: str | Path, cfg: SandboxConfig, lanes=None,
                       cancel: threading.Event | None = None) -> Measurement:
    """Time (or read from the cache) only the task's eager and torch.compile baselines: the
    reference worker alone, no solution. Raises TaskError for an unusable task. ``lanes``
    (sandbox.lanes.DeviceLanes) places it among other evaluations sharing the devices: several
    compile at once, each times alone; ``cancel`` ends it (process.Cancelled)."""
    task_source = load_task_source(task_path)
    check_backend(cfg)
    m = Measurement(backend=cfg.backend, tolerance=cfg.tolerance)
    eval_dir = Path(tempfile.mkdtemp(prefix="cuda-agent-baselines-"))
    try:
        (eval_dir / "solution").mkdir()
        (eval_dir / "solution" / "model.py").write_text(task_source, encoding="utf-8")
        evaluation = _Evaluation(cfg, m, eval_dir, "baselines", lanes or SoloLanes(cfg), cancel)
        evaluation.run(evaluation._baselines_stage)
    finally:
        shutil.rmtree(eval_dir, ignore_errors=True)
    return m


class _Evaluation:
    """The stages of one evaluation; each stage fills part of the measurement."""

    def __init__(self, cfg: SandboxConfig, m: Measurement, eval_dir: Path, solution_key: str, lanes: "SoloLanes",
                 cancel: threading.Event | None = None, stop_after: str = "timing"):
        self.cfg, self.m, self.eval_dir, self.stop_after = cfg, m, eval_dir, stop_after
        self.solution_key, self.lanes = solution_key, lanes
        self.cancel = cancel or threading.Event()
        self.handover = HandoverSockets()
        # The task's weights, reference -> run worker (sandbox.weights).
        self.weights = WeightsMemory()
        self.checks = CallChecks(m)
        why_not = namespaces_available() if cfg.isolate else "disabled by config (isolate: false)"
        self.isolate = not why_not
        m.isolation = ISOLATED if self.isolate else f"none: {why_not}"
        self.workers: list[WorkerProcess] = []
        self.cgroups: list[WorkerCgroup] = []
        # The evaluation's hold on its device (set for the device phase; a no-op one until then).
        self.lane = LaneSession(None, "", self.cancel)
        self.job = {
            "backend": cfg.backend, "task_path": str(eval_dir / "solution" / "model.py"),
            "solution_dir": str(eval_dir / "solution"), "cache_root": str(cfg.cache_root),
            # Input seeds are drawn by the run worker right before each call: no job holds any.
            "init_seed": secrets.randbits(31),
            "num_correct_trials": cfg.num_correct_trials, "post_timing_trials": cfg.post_timing_trials,
            "guards": cfg.guards,
            "allowed_libraries": list(cfg.allowed_libraries), "file_size_limit_mb": cfg.file_size_limit_mb,
            "host_memory_limit_gb": cfg.host_memory_limit_gb, "device_memory_limit_gb": cfg.device_memory_limit_gb,
            "timing": cfg.to_dict()["timing"],
            "compile_baseline": cfg.compile_baseline, "cuda_arch": cfg.cuda_arch,
            "cxx_flags": list(cfg.cxx_flags), "nvcc_flags": list(cfg.nvcc_flags),
            "build_jobs": cfg.build_jobs, "compile_timeout_s": cfg.compile_timeout_s,
            "precompiled_header": cfg.precompiled_header,
            "tolerance": cfg.tolerance, "max_output_mb": cfg.max_output_mb,
            "device_handover": cfg.device_handover,
        }
        # Device hand-overs cannot be sealed: the run worker is stopped while its output is checked.
        self.freeze_for_checks = cfg.backend == "cuda" and cfg.device_handover

    def spawn(self, role: str, extra_job: dict | None = None, pass_fds: tuple[int, ...] = (),
              hold: bool = False) -> WorkerProcess:
        """Start a worker; a held one imports torch, then waits for "start <device>"."""
        # Builds and held workers stay off the lanes' cores; a held one moves to its lane's.
        job = dict(self.job, **(extra_job or {}), hold=hold, cpus=list(self.lanes.cpus.builds))
        env = worker_env(self.cfg, role, self.solution_key)
        if self.lanes.pooled and self.cfg.backend == "cuda":
            # Pooled: builds never touch a GPU; held workers learn theirs when their lane is free.
            env["CUDA_VISIBLE_DEVICES"] = ""
        if self.isolate and role in SOLUTION_ROLES:
            # Solution code may write its own worker directory and its extension build; nothing else.
            # The run worker only imports what the build worker built: its extension directory is read-only.
            writable = [str(self.eval_dir / role)] + ([env["TORCH_EXTENSIONS_DIR"]] if role == "build" else [])
            job.update(confine=True, writable=writable)
            job["cgroup_procs"] = self._worker_cgroup()
        worker = WorkerProcess(role, job, self.eval_dir, env, pass_fds, isolate=self.isolate, cancel=self.cancel)
        self.workers.append(worker)
        return worker

    def run(self, stages=None) -> None:
        """``stages`` (default: a solution's, ``_stages``), then every worker killed."""
        try:
            (stages or self._stages)()
        finally:
            self._close_workers()
            self.handover.close()  # pooled and not built: no worker ever took its end
            self.weights.close()  # no run worker came (not built, a task error, the baselines flow)

    def _close_workers(self) -> None:
        """Kill every worker (their reports are in; an orderly exit of a torch process costs
        up to a second of lane time) and keep their logs."""
        for w in self.workers:
            if w.role not in self.m.logs:
                w.kill()
                self.m.logs[w.role] = w.log_tail(self.cfg.log_chars)
        while self.cgroups:
            self.cgroups.pop().remove()

    def _stages(self) -> None:
        """Alone, the reference runs while the solution builds (a broken task is then always
        reported as a task error). Pooled, builds take a CPU slot, and the device work
        (reference, verification, timing) holds a slot of a device lane: the reference and run
        workers start with the build and wait, torch imported, until the slot is theirs (their
        start-up overlaps the build instead of following it; a failed build kills them unstarted)."""
        pooled, only_build = self.lanes.pooled, self.stop_after == "build"
        # The operator recorder compiles (first use on this machine only) while the solution builds.
        recorder = (RECORDER_BUILDS.submit(library_path, self.cfg.cache_root)
                    if self.cfg.guards and not only_build else None)
        held = pooled and not only_build
        # A held run worker's job names the recorder: on a machine's first use, its compile comes first.
        if held and recorder and not self._install_recorder(recorder):
            return
        ref = self._spawn_reference(hold=False) if not pooled and not only_build else None
        run = None
        with self.lanes.build_slot(self.cancel):
            if held:
                # Started with the build, not before its slot: evaluations queued for a build slot
                # hold no importing workers that would take the cores from the builds in progress.
                ref, run = self._spawn_reference(hold=True), self._spawn_with_handover("run", hold=True)
            built = self._build_stage()
        if only_build:
            self.m.compiled = bool(built)
            return
        if (pooled and not built) or (built and recorder and not held and not self._install_recorder(recorder)):
            return
        if self._await_held(ref, run):
            self._on_device(lambda device: self._device_phase(device, ref, run, built))

    def _baselines_stage(self) -> None:
        """The baselines flow (evaluate_baselines): the reference worker alone, no solution; on
        its lane slot, the reference run, then the baselines (cached, or compiled and timed)."""
        ref = self._spawn_reference(hold=self.lanes.pooled, for_run=False)

        def on_device(device: str) -> None:
            info = self._reference_stage(ref, "reference", self._release(ref, device))
            self.m.device = info["device"]
            self._baselines(ref, info["baselines_cached"])

        if self._await_held(ref, None):
            self._on_device(on_device)

    def _await_held(self, ref: WorkerProcess, run: WorkerProcess | None) -> bool:
        """Wait until the held workers have imported what they need (``stage_seconds
        ["worker_start"]``: seconds of start-up), so that a device lane is taken for device work
        only. A worker that dies meanwhile ran no task or solution code yet: a sandbox error.
        Alone, nothing is held: True at once."""
        if not self.lanes.pooled:
            return True
        start = time.monotonic()
        try:
            for worker in (ref, run):
                if worker is not None:
                    worker.wait_for("held", self.cfg.reference_timeout_s)
            return True
        except StageFailure as exc:
            self.m.fail(ErrorKind.SANDBOX_ERROR, f"held worker start-up: {exc.detail}")
            return False
        finally:
            self.m.stage_seconds["worker_start"] = time.monotonic() - start

    def _on_device(self, phase) -> None:
        """``phase(device)`` on a slot of a device lane, every worker killed before the slot is
        released (nothing of this evaluation runs on the device after its slot)."""
        with self.lanes.device(self.cancel) as device, self.lanes.session(device, self.cancel) as self.lane:
            try:
                phase(device)
            finally:
                self._close_workers()
                if self.lanes.pooled:  # seconds its commands and timed sections waited for other evaluations
                    self.m.stage_seconds["lane_wait"] = self.lane.waited_s

    def _release(self, worker: WorkerProcess, device: str):
        """Pooled: the start of a held worker onto ``device`` and its lane's cores (alone: None,
        the worker started at once)."""
        if not self.lanes.pooled:
            return None
        return functools.partial(worker.start, device, self.lanes.cpus.for_lane(device))

    def _device_phase(self, device: str, ref: WorkerProcess, run: WorkerProcess | None, built: bool) -> None:
        """Reference, baselines, verification and timing: each command to a worker holds the
        device shared (``lane.work``), each timed section exclusively (``lane.timing``)."""
        ref_info = self._reference_stage(ref, "reference", self._release(ref, device))
        self.m.device = ref_info["device"]
        if not built:
            return
        self.m.compiled = True
        # Verify-only runs use cached baselines when there are some, and never time new ones.
        if ref_info["baselines_cached"] or self.stop_after == "timing":
            self._baselines(ref, ref_info["baselines_cached"])
        if run is None:  # alone: the run worker starts now, after the reference wrote the weights
            self._run_stage(self._spawn_with_handover("run", hold=False), ref)
        else:
            self._run_stage(run, ref, self._release(run, device))

    def _baselines(self, ref: WorkerProcess, cached: bool) -> None:
        """The cache's baselines, or new ones: torch.compile's compile work first, untimed and
        held shared (``lane.compiling``: beside other evaluations' work and compiles), then the
        eager and compiled timed runs held exclusively (``lane.timing``)."""
        if cached:
            self._record_baselines(self._reference_stage(ref, "baselines"), True)
            return
        if self.cfg.compile_baseline:
            self._compile_baseline(ref)
        with self.lane.timing():
            self._record_baselines(self._reference_stage(ref, "baselines", lambda: ref.send("go")), False)

    def _compile_baseline(self, ref: WorkerProcess) -> None:
        """The reference worker's torch.compile and first call; ``stage_seconds["compile"]``."""
        with self.lane.compiling():
            start = time.monotonic()
            try:
                ref.send("compile")
                self._from_reference(ref, "compiled")
            finally:
                self.m.stage_seconds["compile"] = time.monotonic() - start

    def _install_recorder(self, build: Future) -> bool:
        """The run worker's operator recorder, compiled in this process (trusted code)."""
        try:
            self.job["op_recorder"] = str(build.result())
        except RecorderError as exc:
            self.m.fail(ErrorKind.SANDBOX_ERROR, str(exc))
            return False
        return True

    def _worker_cgroup(self) -> list[str]:
        """A cgroup capping the worker's processes and host memory (as root, where possible)."""
        memory = int(self.cfg.host_memory_limit_gb * (1 << 30))
        cgroup, why_not = WorkerCgroup.create(self.cfg.max_processes, memory)
        if cgroup is None:
            self.m.isolation = f"{ISOLATED}; no cgroup caps: {why_not}"
            return []
        self.cgroups.append(cgroup)
        self.m.isolation = f"{ISOLATED}; cgroup caps: {self.cfg.max_processes} processes, " \
                           f"{self.cfg.host_memory_limit_gb:g} GiB"
        return cgroup.procs_files()

    def _spawn_reference(self, hold: bool, for_run: bool = True) -> WorkerProcess:
        """``for_run``: a run worker will need the task's weights (the baselines flow has none)."""
        return self._spawn_with_handover("reference", hold, weights=for_run)

    def _spawn_with_handover(self, role: str, hold: bool, weights: bool = True) -> WorkerProcess:
        """The run or reference worker, with its end of the hand-over socket (the judge's copy closed)
        and, with ``weights``, the weights' shared memory (sandbox.weights)."""
        fd, weights_fd = self.handover.fd(role), self.weights.fd if weights else None
        worker = self.spawn(role, {"handover_fd": fd, "weights_fd": weights_fd},
                            (fd,) if weights_fd is None else (fd, weights_fd), hold=hold)
        self.handover.close(role)
        if weights_fd is not None:
            self.weights.passed_to(role)
        return worker

    def _build_stage(self) -> bool:
        if self.lanes.pooled and self.lanes.install_cached_build(self.eval_dir / "solution", self.cfg):
            self.m.stage_seconds["build"] = 0.0
            return True
        build = self.spawn("build")
        return bool(self._stage("build", lambda: build.wait_for("build", self.cfg.compile_timeout_s),
                                compile_stage=True))

    def _reference_stage(self, ref: WorkerProcess, name: str, send=None) -> dict:
        """Report ``name`` of the reference worker, after ``send`` (its command, if any)."""
        with self.lane.harness():
            start = time.monotonic()
            try:
                if send:
                    send()
                return self._from_reference(ref, name)
            finally:
                self.m.stage_seconds[name] = self.m.stage_seconds.get(name, 0.0) + time.monotonic() - start

    def _from_reference(self, ref: WorkerProcess, name: str) -> dict:
        """Report ``name`` of the reference worker; its failures are the task's."""
        try:
            return ref.wait_for(name, self.cfg.reference_timeout_s)
        except StageFailure as exc:
            if exc.kind == TASK_ERROR:
                raise TaskError(f"task failed in the reference run: {exc.detail.strip().splitlines()[-1]}") from None
            raise TaskError(f"reference run failed ({exc.kind}): {exc.detail.strip()[-300:]}") from None

    def _stage(self, name: str, action, compile_stage: bool = False):
        """Run one stage; on failure record it (typed) and return None."""
        start = time.monotonic()
        try:
            return action() or True
        except CheckFailed:
            return None
        except StageFailure as exc:
            kind = exc.kind
            if compile_stage and kind == ErrorKind.TIMEOUT:
                kind = ErrorKind.COMPILE_TIMEOUT
            if kind == ErrorKind.COMPILE_ERROR:  # also from the run worker: a build it refused
                self.m.compiled = False
            if kind == ErrorKind.VIOLATION:
                self.m.violations.append(exc.detail)
            self.m.fail(kind, exc.detail)
            return None
        finally:
            self.m.stage_seconds[name] = time.monotonic() - start

    def _record_baselines(self, baselines: dict, cached: bool) -> None:
        self.m.baseline_cached = cached
        self.m.eager_stats = TimingStats(**baselines["eager"])
        self.m.eager_us = self.m.eager_stats.median_us
        if baselines.get("compile"):
            self.m.compile_stats = TimingStats(**baselines["compile"])
            self.m.compile_us = self.m.compile_stats.median_us
        self.m.compile_error = baselines.get("compile_error")

    def _run_stage(self, run: WorkerProcess, ref: WorkerProcess, start=None) -> None:
        """Verified trials (after ``start``, the held run worker's release), then timing with
        spot checks, then the post-timing trials; each checked call is checked by the reference
        worker as soon as it returned (one at a time). Waits for the device do not count
        against ``run_timeout_s``."""
        self.lane.solution_workers.append(run)
        deadline = self.lane.clock() + self.cfg.run_timeout_s
        report = self._stage("verify", lambda: self._serve_checks(run, ref, "outputs", deadline, start))
        if not report:
            return
        self._note_peaks("run", report)
        if not self._no_violations(report) or self.stop_after == "verify":
            run.send("stop")
            return
        with self.lane.timing():
            timing = self._stage("timing", lambda: self._serve_checks(
                run, ref, "timing", max(deadline, self.lane.clock() + 1.0), lambda: run.send("go")))
        if not timing:
            self.m.correct = False
            return
        self._note_peaks("run", timing)
        self.m.runtime_stats = TimingStats(**timing["runtime"])
        self.m.runtime_us = self.m.runtime_stats.median_us
        self.m.stage_seconds["spot_checks"] = float(timing.get("spot_check_s", 0.0))
        self._no_violations(timing)
        if not self.m.correct:
            self.m.runtime_us = None

    def _serve_checks(self, run: WorkerProcess, ref: WorkerProcess, until: str, deadline: float, send) -> dict:
        """The run worker's reports up to ``until``, after ``send`` (the command that starts the
        phase): each checked call it reports ("kept") is checked by the reference worker before
        the run worker may go on ("next"). A failed check stops the run worker and the stage
        (CheckFailed; the verdict is recorded). ``deadline`` is on the lane's clock."""
        while True:
            with self.lane.work():  # the run worker works on the device until it reports
                if send:
                    send()
                phase, payload = run.wait_for_any(("kept", until), max(deadline - self.lane.clock(), 0.1))
            if phase == until:
                return payload
            # Tampering found with this call decides before its check.
            if not self._no_violations(payload) or not self._checked(run, ref, payload):
                run.send("stop")
                raise CheckFailed()
            send = functools.partial(run.send, "next")

    def _checked(self, run: WorkerProcess, ref: WorkerProcess, payload: dict) -> bool:
        """Whether the call the run worker just handed over matches the reference worker's."""
        kind = TIMED_RUN if payload.get("kind") == TIMED_RUN else TRIAL
        with self.lane.harness():
            start = time.monotonic()
            # Every thread of the run worker stopped before the reference worker copies the output
            # (see _Evaluation.freeze_for_checks and docs/sandbox.md, "Trial data").
            stopped = freeze_tree(run.proc) if self.freeze_for_checks else []
            try:
                ref.send("check", int(payload["seed"]), peer=run.nonce)
                result = self._from_reference(ref, "checked")
            finally:
                thaw(stopped)
        self._note_peaks("reference", result)
        if result.get("channel"):
            self.m.handovers[result["channel"]] = self.m.handovers.get(result["channel"], 0) + 1
        if kind == TRIAL:
            self.m.stage_seconds["check"] = self.m.stage_seconds.get("check", 0.0) + time.monotonic() - start
        return self.checks.record(kind, payload, result)

    def _note_peaks(self, role: str, payload: dict) -> None:
        """A worker's peak host (RSS) and device memory from its report, the highest kept."""
        for key, peaks in (("max_rss_mb", self.m.worker_max_rss_mb), ("device_peak_mb", self.m.worker_device_peak_mb)):
            if payload.get(key) is not None:
                peaks[role] = max(peaks.get(role, 0.0), float(payload[key]))

    def _no_violations(self, report: dict) -> bool:
        found = [str(v) for v in report.get("violations", [])]
        if found:
            self.m.violations.extend(found)
            self.m.fail(ErrorKind.VIOLATION, "; ".join(found))
        return not found


class CheckFailed(Exception):
    """A checked call failed; the measurement holds why."""
