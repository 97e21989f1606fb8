"""Worker processes of one evaluation: ``python -m sandbox.worker ROLE JOB.json``.

Roles:
- ``reference``: builds the task's Model (its weights go to the run worker), times the eager and
  torch.compile baselines (or reads them from the cache), then computes reference outputs for
  the seeds the judge asks about, until told to stop. Trusted harness code only.
- ``build``: compiles the solution (workspace build or the solution's own load_inline) and
  imports it once. Runs solution code.
- ``run``: runs ModelNew on the verified trials, hands the outputs over, then times it on
  command, with spot checks and post-timing trials. Runs solution code.

Each worker reports to the judge over a pipe (one JSON line per phase, or an error), and takes
commands (``sandbox.protocol``: "go", "next", "check", "stop") on stdin, so that the judge decides
when timing may use the device. Every report carries the nonce of the latest command: a line that
solution code writes into the pipe without it is a forgery the judge rejects. A checked call's
output goes from the run worker to the reference worker in shared memory (``sandbox.handover``:
device memory on CUDA, a sealed memfd on the CPU), one call at a time; no trial data is written
to a file.
Anything the solution prints goes to the worker's log, not to the judge's stdout.

Inputs come from seeds: the run worker draws one from the OS right before each call of the
solution (no file, and nothing in memory before the call, predicts it) and reports the seeds of
the calls it kept; the reference worker regenerates exactly those inputs on the same kind of
device and computes the reference for them.
"""
from __future__ import annotations

import contextlib
import json
import os
import platform
import resource
import socket
import sys
import traceback
from pathlib import Path

# Nothing from the solution is imported before these are bound.
import torch

from .baselines import baseline_cache_path, load_baselines, store_baselines
from .placement import parse_cpus, pin_process
from .checks import TIMED_RUN, TRIAL, judge_call
from .config import SandboxConfig, TimingConfig
from .errors import TASK_ERROR
from .build import summarize_compiler_output
from .measurement import ErrorKind, TimingStats
from .cgroups import join as join_cgroups
from .confine import ConfinementError, confine
from .extensions import Builds
from .guards import check_timing_inputs, input_layout, task_fingerprint, task_tampering
from .handover import CHANGED, DEVICE, HOST, HandoverError, device_channel, receive_handover, send_output
from .inputs import (TRACEBACK_CHARS, WorkerFailure, chance, check_inputs, call_task, describe_exception, fresh_seed,
                     inputs_digest, load_module, save_tensors, seeded_inputs)
from .protocol import Command
from .trial_size import check_trial_fits, host_memory_bytes
from .timing import Call, Caller, _perf_counter, harness_fingerprint, measure, tampered_harness, timed_runs

# Bound before solution code runs (this module is fingerprinted with the harness).
_memory_allocated, _max_memory_allocated = torch.cuda.memory_allocated, torch.cuda.max_memory_allocated


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


# ---------------------------------------------------------------- roles

def role_reference(job: dict, out: Path, channel: Channel) -> None:
    """Weights for the run worker, the baselines, then a check of each output the run worker
    hands over, as often as the judge asks (the worker stays until told to stop)."""
    device = worker_device(job["backend"])
    torch.set_num_threads(job["timing"]["cpu_threads"])
    task = load_module(Path(job["task_path"]), "model")
    model = reference_model(task, job, out, device)
    check_trial_fits(task, job, device)
    check_reproducible_inputs(task, device)
    release_cached_memory(device)
    cache_path = baseline_cache_path(job, device_name(device))
    baselines = load_baselines(cache_path)
    channel.report("reference", {"device": device_name(device), "baselines_cached": baselines is not None})
    if baselines is not None:
        channel.report("baselines", baselines)
    handover = socket.socket(fileno=job["handover_fd"])
    handover.settimeout(HANDOVER_TIMEOUT_S)
    cfg = SandboxConfig(backend=job["backend"], tolerance=job["tolerance"])
    while (command := channel.wait_command()).name != "stop":
        if command.name == "go" and baselines is None:
            baselines = time_baselines(task, model, job, device)
            store_baselines(cache_path, baselines)
            channel.report("baselines", baselines)
        elif command.name == "check":
            result = check_call(task, model, handover, command, device, cfg)
            release_cached_memory(device)
            channel.report("checked", dict(result, max_rss_mb=max_rss_mb()))


# Seconds the reference worker waits for a hand-over the run worker has already reported.
HANDOVER_TIMEOUT_S = 30.0


def check_call(task, model, handover: socket.socket, command: Command, device: torch.device,
               cfg: SandboxConfig) -> dict:
    """Take the run worker's handed-over output, regenerate the call's inputs from its seed,
    compute the reference and compare, here (the run worker never holds a reference output).
    Device channel: compared in the run worker's memory, which the judge keeps it from touching
    meanwhile (its process tree is stopped) and which ``Handed`` watches for any other writer."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)  # this check's peak, not the baselines'
    try:
        handed = receive_handover(handover, command.peer, device)
    except (HandoverError, OSError, ValueError) as exc:  # OSError: nothing arrived in time
        return {"forged": str(exc)}
    try:
        if int(handed.header.get("seed", -1)) != command.seed:
            return {"forged": "the hand-over is not the call the judge asked about"}
        with torch.no_grad():
            inputs = seeded_inputs(task, command.seed, device)
            given = inputs_digest(inputs)
            try:
                expected = model(*inputs)
            except Exception as exc:
                raise WorkerFailure(TASK_ERROR, f"Model.forward raised {type(exc).__name__}: {exc}") from None
            del inputs
            result = judge_call(expected, handed.output, cfg, handed.read)
            del expected
        if not handed.unchanged():  # device channel: someone wrote into it after it arrived
            return {"forged": CHANGED}
        return dict(result, inputs_given=given, channel=handed.header.get("channel", HOST),
                    device_peak_mb=device_peak_mb(device, mapped_bytes=handed.mapped_bytes()))
    except HandoverError as exc:  # a chunk the comparison read no longer held what arrived
        return {"forged": str(exc)}
    finally:
        handed.close()


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


def reference_model(task, job: dict, out: Path, device: torch.device) -> torch.nn.Module:
    """The task's Model under the evaluation's init seed; its weights go to init.pt for the run worker."""
    if not (isinstance(getattr(task, "Model", None), type) and issubclass(task.Model, torch.nn.Module)):
        raise WorkerFailure(TASK_ERROR, "Model is not a torch.nn.Module subclass")
    init_inputs = check_inputs(call_task(task, "get_init_inputs"), "get_init_inputs")
    torch.manual_seed(job["init_seed"])
    try:
        model = task.Model(*init_inputs)
    except Exception as exc:
        raise WorkerFailure(TASK_ERROR, f"Model(*get_init_inputs()) raised {type(exc).__name__}: {exc}") from None
    save_tensors(out / "init.pt", {"init_inputs": init_inputs,
                                   "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()}})
    return model.to(device)


def check_reproducible_inputs(task, device: torch.device) -> None:
    """Checked calls are recomputed from their seeds: get_inputs() must give the same inputs for
    the same seed (a task drawing from another generator would fail every honest solution).
    Compared by digest, so that only one input set exists at a time."""
    seed = fresh_seed()
    first = inputs_digest(seeded_inputs(task, seed, device))
    if inputs_digest(seeded_inputs(task, seed, device)) != first:
        raise WorkerFailure(TASK_ERROR, "get_inputs() is not reproducible under torch.manual_seed / random.seed")


def time_baselines(task, model, job: dict, device: torch.device) -> dict:
    cfg = timing_config(job)
    make_inputs = lambda i: seeded_inputs(task, fresh_seed(), device)  # noqa: E731
    eager = measure(lambda inp: model(*inp), make_inputs, cfg, device)
    result = {"eager": TimingStats.from_samples(eager).__dict__, "compile": None, "compile_error": None}
    if job["compile_baseline"]:
        try:
            compiled = torch.compile(model)
            result["compile"] = TimingStats.from_samples(
                measure(lambda inp: compiled(*inp), make_inputs, cfg, device)).__dict__
        except Exception as exc:  # inductor unavailable or the task does not compile
            result["compile_error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
    release_cached_memory(device)
    return result


def release_cached_memory(device: torch.device) -> None:
    """This worker waits on the device while the solution runs: it keeps no cached blocks."""
    if device.type == "cuda":
        torch.cuda.empty_cache()


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


def role_build(job: dict, out: Path, channel: Channel) -> None:
    from .build import build_workspace, make_toolchain
    from .errors import CompileError
    from .solution import read_solution

    solution_dir = Path(job["solution_dir"])
    arch = set_arch_env(job)
    report = {"compiled": [], "reused": [], "arch": arch}
    if read_solution(solution_dir).has_kernels:
        try:
            tc = make_toolchain(job["backend"], arch, tuple(job["cxx_flags"]), tuple(job["nvcc_flags"]))
            built = build_workspace(solution_dir, solution_dir / "build", tc, Path(job["cache_root"]),
                                    job["build_jobs"], job["compile_timeout_s"])
        except CompileError as exc:
            raise WorkerFailure(ErrorKind.COMPILE_ERROR, summarize_compiler_output(str(exc))) from None
        report.update(compiled=built.compiled, reused=built.reused, workspace_build_s=built.seconds)
    # Only compilers ran so far (the object cache needed writing); solution code starts here.
    confine_if_asked(job)
    builds = Builds()
    builds.record_failures()
    model_cls = import_solution(solution_dir)
    construct_for_builds(model_cls, Path(job["task_path"]))
    if builds.failure():  # a failed load_inline, even one the solution caught and fell back from
        raise WorkerFailure(ErrorKind.COMPILE_ERROR, summarize_compiler_output(builds.failure()))
    channel.report("build", report)


def construct_for_builds(model_cls, task_path: Path) -> None:
    """ModelNew's __init__ once, on the meta device (no memory, no GPU): load_inline calls made
    there compile here, in the build worker, like those at import. Other failures of __init__
    are the run worker's to report, on the real device."""
    try:
        init_inputs = check_inputs(call_task(load_module(task_path, "model"), "get_init_inputs"), "get_init_inputs")
        with torch.device("meta"):
            model_cls(*init_inputs)
    except Exception:
        pass


def load_matching_weights(model: torch.nn.Module, state_dict: dict) -> bool:
    """Load the reference weights when the parameter structure matches (KernelBench's rule)."""
    own = model.state_dict()
    if set(own) != set(state_dict) or any(own[k].shape != state_dict[k].shape for k in own):
        return False
    model.load_state_dict(state_dict)
    return True


def make_guard(job: dict):
    """Guards take their baselines now, before any solution code is imported."""
    from .guards import ForwardGuard

    if not job["guards"]:
        return None
    if job["backend"] == "cuda":
        # Let torch load what it loads lazily on first CUDA use (NVML, cuBLAS handles stay
        # out: no GEMM runs here) before the library baseline is taken.
        torch.empty(1, device="cuda").add_(1)
        torch.cuda.synchronize()
        torch.cuda.get_device_name(0)
    own = [job["solution_dir"], os.environ.get("TORCH_EXTENSIONS_DIR", ""), job["cache_root"]]
    return ForwardGuard(job["allowed_libraries"], own, job["op_recorder"])


class SeededCalls:
    """make_inputs of the run worker's calls: each input set from a seed drawn right before the
    call, checked against the task's layout (the solution shares this process with get_inputs)."""

    def __init__(self, task, device: torch.device, guard):
        self.task, self.device, self.guard = task, device, guard
        self.seed = fresh_seed()
        self.layout = input_layout(seeded_inputs(task, self.seed, device))  # before the solution is imported

    def __call__(self, _index: int) -> list:
        if self.guard:
            self.guard.leave_call()  # the previous call (and the copy of its output) is over
        self.seed = fresh_seed()
        inputs = seeded_inputs(self.task, self.seed, self.device)
        problem = check_timing_inputs(inputs, self.layout)
        if problem:
            raise WorkerFailure(ErrorKind.VIOLATION, f"task_tampered: {problem}")
        return inputs


class Stopped(Exception):
    """The judge said stop instead of "next": a checked call failed; the worker ends quietly."""


class Handover:
    """Checked calls (verified trials, spot-checked timed runs): right after the call returned,
    while the recorder still watches, the digest of its inputs as it left them and its output
    go to the reference worker (shared memory: ``sandbox.handover``); the judge has it checked
    there, then says "next". One call at a time: nothing of a checked call outlives its check.
    Once copied, the harness drops the output (``Call.output``) before it reports: on the device
    channel, while the reference worker checks, this worker holds the call's inputs and the copy
    (freed once the check is acknowledged), not the output as well."""

    def __init__(self, job: dict, channel: Channel, guard, tampering, on_device: bool):
        self.sock = socket.socket(fileno=job["handover_fd"])
        self.channel, self.guard, self.tampering = channel, guard, tampering
        self.limit = job["max_output_mb"] << 20
        self.on_device = on_device
        self.seconds = 0.0
        # Most device memory seen in use while a call's output and its copy both existed.
        self.peak_bytes = 0

    def check(self, kind: str, label: str, seed: int, call: Call) -> None:
        start = _perf_counter()
        record = {"kind": kind, "label": label, "seed": seed}
        shared = send_output(self.sock, call.output, dict(record, nonce=self.channel.nonce), self.limit,
                             self.on_device)
        if shared:
            self.peak_bytes = max(self.peak_bytes, _memory_allocated() + shared.size)
        call.output = None
        try:
            if self.guard:
                self.guard.leave_call()  # the copy was watched; the digest's own arithmetic (CUDA) is the harness's
            record["inputs_after"] = inputs_digest(call.inputs)
            record["channel"] = DEVICE if shared else HOST
            self.channel.report("kept", dict(record, violations=self.tampering()))
            proceed = self.channel.wait_command().name == "next"
        finally:
            if shared:
                shared.close()
        self.seconds += _perf_counter() - start
        if not proceed:
            raise Stopped()


def checked_calls(caller: Caller, inputs: SeededCalls, labels: list[str], guard, handover: Handover) -> None:
    """Call forward once per label and have every call checked (the verified trials)."""
    for label in labels:
        call = caller()
        handover.check(TRIAL, label, inputs.seed, call)
        del call  # the output is gone before the next call, as after every timed run
    if guard:
        guard.leave_call()
    if caller.cuda:
        torch.cuda.synchronize()  # surface asynchronous kernel faults here


@contextlib.contextmanager
def solution_errors(prefix: str = "", builds: Builds | None = None):
    """An exception from solution code (or a CUDA fault it caused) is the solution's runtime error;
    a build it tried here (refused: builds happen in the build worker) is a compile error, even
    when the solution caught the refusal."""
    try:
        yield
    except (WorkerFailure, Stopped):
        raise
    except Exception as exc:
        refused_build(builds)
        raise WorkerFailure(ErrorKind.RUNTIME_ERROR, prefix + describe_exception(exc)) from None
    refused_build(builds)


def refused_build(builds: Builds | None) -> None:
    if builds is not None and builds.failure():
        raise WorkerFailure(ErrorKind.COMPILE_ERROR, builds.failure())


def guarded_forward(model: torch.nn.Module, guard):
    """run(inputs) for the Caller: the recorder's call window opens as forward starts."""
    if guard is None:
        return lambda inputs: model(*inputs)

    def forward(inputs: list):
        guard.enter_call()
        return model(*inputs)

    return forward


def role_run(job: dict, out: Path, channel: Channel) -> None:
    """Verified trials, then (on "go") warm-up, timed runs with spot checks, and post trials:
    every call through one Caller, every checked call reported by seed."""
    device = worker_device(job["backend"])
    torch.set_num_threads(job["timing"]["cpu_threads"])
    task = load_module(Path(job["task_path"]), "model")
    init = torch.load(job["init_path"], weights_only=True)
    guard = make_guard(job)
    watched = harness_modules()
    harness = harness_fingerprint(watched)
    task_before = task_fingerprint(task)
    inputs = SeededCalls(task, device, guard)
    not_on_device = device_channel(job["backend"], job.get("device_handover", False))
    if job["backend"] == "cuda" and not_on_device:
        print(f"sandbox: checked outputs go through host memory: {not_on_device}", flush=True)
    set_arch_env(job)
    cap_device_memory(job, device)
    confine_if_asked(job)
    builds = Builds()
    builds.import_only()  # nothing compiles here: the build worker built what the solution loads
    model_cls = import_solution(Path(job["solution_dir"]))
    cfg, n_pre = timing_config(job), job["num_correct_trials"]
    with solution_errors(builds=builds):
        torch.manual_seed(job["init_seed"])
        model = model_cls(*init["init_inputs"])
        weights_loaded = load_matching_weights(model, init["state_dict"])
        caller = Caller(guarded_forward(model.to(device), guard), inputs, cfg, device)
        if guard:
            guard.arm()
        handover = Handover(job, channel, guard, lambda: tampering(harness, watched, task_before, task),
                            on_device=not not_on_device)
        checked_calls(caller, inputs, [f"trial {k}" for k in range(n_pre)], guard, handover)
    channel.report("outputs", {"weights_loaded": weights_loaded, "max_rss_mb": max_rss_mb(),
                               "device_peak_mb": device_peak_mb(device, seen_bytes=handover.peak_bytes),
                               "violations": run_violations(guard, harness, watched, task_before, task)})
    if channel.wait_command().name != "go":
        return
    handover.seconds = 0.0

    def spot_check(i: int, call: Call) -> None:
        if chance(cfg.spot_check_probability):  # drawn only now that the run has returned
            handover.check(TIMED_RUN, f"timed run {i}", inputs.seed, call)

    with solution_errors("during timing: ", builds):
        samples = timed_runs(caller, cfg, spot_check)
        spot_check_s = handover.seconds
        checked_calls(caller, inputs, [f"trial {n_pre + k} after timing" for k in range(job["post_timing_trials"])],
                      guard, handover)
    channel.report("timing", {"runtime": TimingStats.from_samples(samples).__dict__, "spot_check_s": spot_check_s,
                              "max_rss_mb": max_rss_mb(),
                              "device_peak_mb": device_peak_mb(device, seen_bytes=handover.peak_bytes),
                              "violations": run_violations(guard, harness, watched, task_before, task)})


def run_violations(guard, harness: dict, watched: list, task_before: dict, task) -> list[str]:
    """Everything the run worker itself found: the guards', harness and task tampering."""
    violations = guard.violations() if guard else []
    return violations + tampering(harness, watched, task_before, task)


def tampering(harness: dict, watched: list, task_before: dict, task) -> list[str]:
    """Replaced harness functions and a changed task (cheap: checked with every checked call, so
    that frozen inputs are reported as what they are, not as the mismatch they cause)."""
    found = [f"harness_tampered: {name} was replaced" for name in tampered_harness(harness, watched)]
    return found + task_tampering(task_before, task)


def apply_limits(job: dict, role: str = "") -> None:
    """Per-evaluation caps on what a worker may consume (hard limits: the solution cannot raise
    them unless it runs as root). data_gen's filter workers use them too (no role)."""
    # The run worker's outputs are files too (memfds handed to the reference worker). The
    # reference (task code, no solution) writes the task's weights for the run worker (init.pt):
    # KernelBench has 4 GiB Linears, so its cap is the host's memory, which torch.save's buffer
    # must fit in anyway.
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


def harness_modules() -> list:
    """Modules whose functions the verdict depends on inside this process (this one included)."""
    from . import device_memory, guards, handover, inputs, measurement, protocol, recorder, timing

    return [sys.modules[__name__], timing, guards, measurement, recorder, protocol, inputs, handover,
            device_memory, sys.modules[confine.__module__]]


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


ROLES = {"reference": role_reference, "build": role_build, "run": role_run}


def main(argv: list[str]) -> int:
    role, job_path = argv[0], Path(argv[1])
    job = json.loads(job_path.read_text())
    out = Path(job["worker_dir"])
    # First of all: every process and thread this worker (and the solution) starts is counted.
    join_cgroups(job.get("cgroup_procs", []))
    pin_process(job.get("cpus", ()))
    channel = Channel(job["report_fd"])
    if job.get("hold"):
        # Held: torch is imported (the slow part of start-up); no CUDA, no solution code yet.
        started = channel.wait_start()
        if started is None:
            return 0
        device, lane_cpus = started
        pin_process(lane_cpus)
        if job["backend"] == "cuda":
            os.environ["CUDA_VISIBLE_DEVICES"] = "" if device == "-" else device
    try:
        apply_limits(job, role)
        ROLES[role](job, out, channel)
    except Stopped:
        pass
    except WorkerFailure as exc:
        channel.report("error", {"kind": exc.kind, "detail": exc.detail})
    except Exception:
        kind = TASK_ERROR if role == "reference" else ErrorKind.RUNTIME_ERROR
        channel.report("error", {"kind": kind, "detail": traceback.format_exc()[-TRACEBACK_CHARS:]})
    sys.stdout.flush()
    sys.stderr.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
