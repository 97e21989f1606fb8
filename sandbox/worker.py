"""Worker processes of one evaluation: ``python -m sandbox.worker ROLE JOB.json``, the one entry
point of every role (this module, run as ``__main__``; nothing imports it there a second time).

Roles:
- ``reference`` (``sandbox.reference_role``): builds the task's Model (its weights go to the run
  worker through sealed shared memory, ``sandbox.weights``), times the eager and torch.compile
  baselines (or reads them from the cache), then checks the outputs the run worker hands over,
  until told to stop. Trusted harness code only.
- ``build`` (``sandbox.build_role``): compiles the solution (workspace build or the solution's own
  load_inline) and imports it once. Runs solution code.
- ``run`` (here): runs ModelNew on the verified trials, hands the outputs over, then times it on
  command, with spot checks and post-timing trials. Runs solution code.
What all three share (the channel to the judge, device, caps, confinement) is ``sandbox.worker_common``.

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
import socket
import sys
import traceback
from pathlib import Path

# Nothing from the solution is imported before these are bound.
import torch

from .build_role import role_build
from .cgroups import join as join_cgroups
from .checks import TIMED_RUN, TRIAL
from .errors import TASK_ERROR
from .extensions import Builds
from .guards import check_timing_inputs, input_layout, task_fingerprint, task_tampering
from .handover import DEVICE, HOST, device_channel, send_output
from .inputs import (TRACEBACK_CHARS, WorkerFailure, chance, describe_exception, fresh_seed, inputs_digest, load_module,
                     seeded_inputs)
from .measurement import ErrorKind, TimingStats
from .placement import pin_process
from .reference_role import role_reference
from .timing import Call, Caller, _perf_counter, harness_fingerprint, tampered_harness, timed_runs
from .weights import read_weights
from .worker_common import (Channel, apply_limits, cap_device_memory, confine_if_asked, device_peak_mb, import_solution,
                            max_rss_mb, set_arch_env, timing_config, worker_device)

# Bound before solution code runs (this module is fingerprinted with the harness).
_memory_allocated = torch.cuda.memory_allocated


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
    init = read_weights(job["weights_fd"])
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
        init = None  # the archive's mapping goes (what ModelNew kept of it stays)
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


def harness_modules() -> list:
    """Modules whose functions the verdict depends on inside this process (this one included)."""
    from . import (confine, device_memory, guards, handover, inputs, measurement, protocol, recorder, timing,
                   worker_common)

    return [sys.modules[__name__], worker_common, timing, guards, measurement, recorder, protocol, inputs, handover,
            device_memory, confine]


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
        # Held: torch is imported (the slow part of start-up); no CUDA, no solution code yet. The
        # judge takes a device lane only once its held workers said so.
        channel.report("held", {})
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
