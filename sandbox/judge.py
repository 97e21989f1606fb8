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
error.
"""
from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import queue
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import torch

from .cgroups import WorkerCgroup
from .checks import TIMED_RUN, TRIAL, CallChecks
from .placement import CpuPlan, format_cpus
from .protocol import FRAME_HEADER, Command
from .config import SandboxConfig
from .errors import TASK_ERROR, SolutionError, TaskError
from .measurement import ErrorKind, Measurement, TimingStats
from .recorder import RecorderError, library_path
from .solution import materialise, read_solution
from .task import load_task_source

POLL_S = 0.02
# Compiles the operator recorder off the evaluation's thread (once per machine and software).
RECORDER_BUILDS = ThreadPoolExecutor(1, thread_name_prefix="op-recorder-build")
# Seconds to keep reading reports after a worker exits (children may still hold the pipe).
EXIT_GRACE_S = 1.0


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
                    worker_command(role, job_path, isolate),
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
        deadline, exited_at = time.monotonic() + timeout_s, None
        while True:
            # Read before looking: a reader that had finished before an empty get() left nothing behind.
            reader_done = not self._reader.is_alive()
            try:
                line = self.reports.get(timeout=POLL_S)
            except queue.Empty:
                line = None
            if line:
                return self._accept(line, name)
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

    def _accept(self, line: bytes, name: str) -> dict:
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
        if report.get("phase") != name:
            raise StageFailure(ErrorKind.SANDBOX_ERROR, f"{self.role} worker reported {report.get('phase')!r}, "
                                                        f"expected {name!r}")
        return report["payload"]

    def start(self, device: str, cpus: tuple[int, ...] = ()) -> None:
        """Release a held worker onto ``device`` (a CUDA_VISIBLE_DEVICES entry) and, when
        given, its lane's host cores."""
        self._write(f"start {device or '-'} {format_cpus(cpus)}")

    def send(self, command: str, seeds: tuple[int, ...] = ()) -> None:
        """Send a command; "go" and "check" carry a fresh nonce, which later reports must repeat."""
        if command in ("go", "check"):
            self.nonce = secrets.token_hex(16)
            self._write(Command(command, self.nonce, tuple(seeds)).line())
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
        if self.proc.poll() is None:
            for pid in [self.proc.pid, *descendants(self.proc.pid)]:
                for kill in (os.killpg, os.kill):
                    try:
                        kill(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
        self.proc.wait()


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


class ReferenceOutputs:
    """Receives the reference worker's frames (inputs and reference outputs of checked calls)
    through a pipe: they never exist as a file that solution code could find, and only the
    reference worker holds the pipe's write end. Each frame is length-prefixed, so it is complete
    without waiting for EOF (which would need every process that inherited the pipe, unshare and
    its shell included, to have exited)."""

    def __init__(self):
        self.read_fd, self.write_fd = os.pipe()
        self._frames: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        with os.fdopen(self.read_fd, "rb") as pipe:
            while len(header := pipe.read(FRAME_HEADER.size)) == FRAME_HEADER.size:
                self._frames.put(pipe.read(FRAME_HEADER.unpack(header)[0]))
        self._frames.put(None)

    def close_write_end(self) -> None:
        if self.write_fd is not None:
            os.close(self.write_fd)
            self.write_fd = None

    def next(self, timeout_s: float = 60.0) -> dict:
        """The next frame, decoded: {"inputs": [...], "outputs": [...]}."""
        try:
            data = self._frames.get(timeout=timeout_s)
        except queue.Empty:
            data = None
        if data is None:
            raise StageFailure(ErrorKind.SANDBOX_ERROR, "the reference worker sent no reference outputs")
        return torch.load(io.BytesIO(data), weights_only=True)


class Cancelled(Exception):
    """The caller cancelled the evaluation; its workers are gone and no result is recorded."""


class SoloLanes:
    """Placement for an evaluation that has the machine to itself: no slots to wait for, the
    configured device, workers started at once."""

    pooled = False
    # Alone on the machine: nothing to keep apart, nothing pinned.
    cpus = CpuPlan()

    def __init__(self, cfg: SandboxConfig):
        self.device_name = str(cfg.device_index)

    @contextlib.contextmanager
    def build_slot(self, cancel: threading.Event):
        yield

    @contextlib.contextmanager
    def device(self, cancel: threading.Event):
        yield self.device_name

    def install_cached_build(self, solution_dir: Path, cfg: SandboxConfig) -> bool:
        return False


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


ISOLATION_PREFIX = ("unshare", "--pid", "--fork", "--mount-proc", "--net", "--ipc", "--")
# What isolated workers get (Measurement.isolation); solution roles are also confined (confine.py).
ISOLATED = "pid+net+ipc+mount namespaces; solution code: read-only filesystem, no capabilities"
# How far an evaluation may be asked to go (evaluate's stop_after), in order.
STAGES = ("build", "verify", "timing")
# Roles that run solution code.
SOLUTION_ROLES = ("build", "run")


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


def worker_command(role: str, job_path: Path, isolate: bool) -> list[str]:
    """The worker's command line; isolated workers get their own PID namespace (they cannot see
    or reach the judge's processes, and everything they start dies with them) and an empty
    network namespace. A shell stays PID 1 there, so that signals behave as usual for Python."""
    command = [sys.executable, "-m", "sandbox.worker", role, str(job_path)]
    if not isolate:
        return command
    return [*ISOLATION_PREFIX, "/bin/sh", "-c", '"$@"; exit $?', "sh", *command]


def check_backend(cfg: SandboxConfig) -> None:
    """Fail fast, with one line, when the requested backend cannot run here."""
    if cfg.backend == "cuda" and not torch.cuda.is_available():
        raise TaskError("backend 'cuda' needs a CUDA GPU and a CUDA build of torch; none is visible "
                        "here (use --backend cpu)")


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


class _Evaluation:
    """The stages of one evaluation; each stage fills part of the measurement."""

    def __init__(self, cfg: SandboxConfig, m: Measurement, eval_dir: Path, solution_key: str, lanes: "SoloLanes",
                 cancel: threading.Event | None = None, stop_after: str = "timing"):
        self.cfg, self.m, self.eval_dir, self.stop_after = cfg, m, eval_dir, stop_after
        self.solution_key, self.lanes = solution_key, lanes
        self.cancel = cancel or threading.Event()
        self.reference = ReferenceOutputs()
        self.checks = CallChecks(cfg, m)
        why_not = namespaces_available() if cfg.isolate else "disabled by config (isolate: false)"
        self.isolate = not why_not
        m.isolation = ISOLATED if self.isolate else f"none: {why_not}"
        self.workers: list[WorkerProcess] = []
        self.cgroups: list[WorkerCgroup] = []
        ref_dir = eval_dir / "reference"
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
            "init_path": str(ref_dir / "init.pt"),
        }

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
            job.update(confine=True, writable=[str(self.eval_dir / role), env["TORCH_EXTENSIONS_DIR"]])
            job["cgroup_procs"] = self._worker_cgroup()
        worker = WorkerProcess(role, job, self.eval_dir, env, pass_fds, isolate=self.isolate, cancel=self.cancel)
        self.workers.append(worker)
        return worker

    def run(self) -> None:
        try:
            self._stages()
        finally:
            self._close_workers()
            self.reference.close_write_end()  # pooled and not built: no reference worker ever took it

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
        reported as a task error). Pooled, builds take a CPU slot, and the GPU work (reference,
        verification, timing) of one evaluation at a time holds a device lane: workers started
        beforehand wait, torch imported, until the lane is theirs."""
        pooled, only_build = self.lanes.pooled, self.stop_after == "build"
        # The operator recorder compiles (first use on this machine only) while the solution builds.
        recorder = (RECORDER_BUILDS.submit(library_path, self.cfg.cache_root)
                    if self.cfg.guards and not only_build else None)
        ref = None if pooled or only_build else self._spawn_reference(hold=False)
        with self.lanes.build_slot(self.cancel):
            built = self._build_stage()
        if only_build:
            self.m.compiled = bool(built)
            return
        if (pooled and not built) or (built and recorder and not self._install_recorder(recorder)):
            return
        run = self.spawn("run", hold=True) if pooled and built else None
        ref = ref or self._spawn_reference(hold=True)
        with self.lanes.device(self.cancel) as device:
            if pooled:
                ref.start(device, self.lanes.cpus.for_lane(device))
            ref_info = self._reference_stage(ref, "reference")
            self.m.device = ref_info["device"]
            if built:
                self.m.compiled = True
                # Verify-only runs use cached baselines when there are some, and never time new ones.
                if ref_info["baselines_cached"] or self.stop_after == "timing":
                    if not ref_info["baselines_cached"]:
                        ref.send("go")
                    baselines = self._reference_stage(ref, "baselines")
                    self._record_baselines(baselines, ref_info["baselines_cached"])
                if run is not None:
                    run.start(device, self.lanes.cpus.for_lane(device))  # after the reference wrote init.pt
                self._run_stage(run or self.spawn("run"), ref)
            self._close_workers()  # nothing of this evaluation runs on the device after its lane

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

    def _spawn_reference(self, hold: bool) -> WorkerProcess:
        ref = self.spawn("reference", {"reference_outputs_fd": self.reference.write_fd}, (self.reference.write_fd,),
                         hold=hold)
        self.reference.close_write_end()
        return ref

    def _build_stage(self) -> bool:
        if self.lanes.pooled and self.lanes.install_cached_build(self.eval_dir / "solution", self.cfg):
            self.m.stage_seconds["build"] = 0.0
            return True
        build = self.spawn("build")
        return bool(self._stage("build", lambda: build.wait_for("build", self.cfg.compile_timeout_s),
                                compile_stage=True))

    def _reference_stage(self, ref: WorkerProcess, name: str) -> dict:
        start = time.monotonic()
        try:
            return self._from_reference(ref, name)
        finally:
            self.m.stage_seconds[name] = self.m.stage_seconds.get(name, 0.0) + time.monotonic() - start

    def _from_reference(self, ref: WorkerProcess, name: str) -> dict:
        """Report ``name`` of the reference worker ("checked": the frame it wrote); its failures
        are the task's."""
        try:
            payload = ref.wait_for(name, self.cfg.reference_timeout_s)
            return self.reference.next(self.cfg.reference_timeout_s) if name == "checked" else payload
        except StageFailure as exc:
            if exc.kind == TASK_ERROR:
                raise TaskError(f"task failed in the reference run: {exc.detail.strip().splitlines()[-1]}") from None
            raise TaskError(f"reference run failed ({exc.kind}): {exc.detail.strip()[-300:]}") from None

    def _stage(self, name: str, action, compile_stage: bool = False):
        """Run one stage; on failure record it (typed) and return None."""
        start = time.monotonic()
        try:
            return action() or True
        except StageFailure as exc:
            kind = exc.kind
            if compile_stage and kind == ErrorKind.TIMEOUT:
                kind = ErrorKind.COMPILE_TIMEOUT
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

    def _run_stage(self, run: WorkerProcess, ref: WorkerProcess) -> None:
        """Verified trials, then timing with spot checks, then the post-timing trials; every
        checked call is compared with the reference outputs of its own seed."""
        deadline = time.monotonic() + self.cfg.run_timeout_s
        report = self._stage("verify", lambda: run.wait_for("outputs", self.cfg.run_timeout_s))
        if not report:
            return
        verified = self._no_violations(report) and self._check(ref, run, report["trials"], TRIAL, "check")
        if not verified or self.stop_after == "verify":
            run.send("stop")
            return
        run.send("go")
        remaining = max(deadline - time.monotonic(), 1.0)
        timing = self._stage("timing", lambda: run.wait_for("timing", remaining))
        if not timing:
            self.m.correct = False
            return
        self.m.runtime_stats = TimingStats(**timing["runtime"])
        self.m.runtime_us = self.m.runtime_stats.median_us
        self.m.stage_seconds["spot_checks"] = float(timing.get("spot_check_s", 0.0))
        if self._no_violations(timing) and self._check(ref, run, timing["spot_checks"], TIMED_RUN, "spot_checks"):
            self._check(ref, run, timing["post_trials"], TRIAL, "check")
        if not self.m.correct:
            self.m.runtime_us = None

    def _no_violations(self, report: dict) -> bool:
        found = [str(v) for v in report.get("violations", [])]
        if found:
            self.m.violations.extend(found)
            self.m.fail(ErrorKind.VIOLATION, "; ".join(found))
        return not found

    def _check(self, ref: WorkerProcess, run: WorkerProcess, record: dict, kind: str, stage: str) -> bool:
        """Compare the calls a run-worker record names with reference outputs the reference
        worker computes now, for their seeds; the time counts towards ``stage``."""
        calls = record.get("calls") or []
        if not calls:
            return True
        start = time.monotonic()
        try:
            data = self.checks.load(record, run.dir)
            if data is None:
                return False
            ref.send("check", tuple(int(call["seed"]) for call in calls))
            reference = self._from_reference(ref, "checked")
            return self.checks.compare(kind, calls, data, reference)
        finally:
            self.m.stage_seconds[stage] = self.m.stage_seconds.get(stage, 0.0) + time.monotonic() - start
