"""The reference worker (``python -m sandbox.worker reference JOB.json``): trusted harness code
only, no solution code ever runs here.

It builds the task's Model (its weights go to the run worker through sealed shared memory,
``sandbox.weights``), checks that one trial fits and that the task's inputs reproduce under a
seed, compiles the Model with torch.compile on "compile" (untimed: the judge holds the device
shared meanwhile, so several workers compile at once), times the eager and compiled baselines on
"go" (or reads them from the cache), then checks each output the run worker hands over ("check
SEED"): it regenerates that call's inputs from the seed, computes the reference and compares,
here. It stays until told to stop.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from .baselines import baseline_cache_path, load_baselines, store_baselines
from .checks import judge_call
from .config import SandboxConfig
from .errors import TASK_ERROR
from .handover import CHANGED, HOST, HandoverError, receive_handover
from .inputs import (WorkerFailure, call_task, check_inputs, fresh_seed, inputs_digest, load_module,
                     seeded_inputs)
from .measurement import TimingStats
from .protocol import Command
from .timing import measure
from .trial_size import check_trial_fits, memory_was_full
from .weights import write_weights
from .worker_common import Channel, device_name, device_peak_mb, max_rss_mb, timing_config, worker_device


def role_reference(job: dict, out: Path, channel: Channel) -> None:
    """Weights for the run worker, the baselines, then a check of each output the run worker
    hands over, as often as the judge asks (the worker stays until told to stop)."""
    device = worker_device(job["backend"])
    torch.set_num_threads(job["timing"]["cpu_threads"])
    task = load_module(Path(job["task_path"]), "model")
    model = reference_model(task, job, device)
    check_trial_fits(task, job, device)
    check_reproducible_inputs(task, device)
    release_cached_memory(device)
    baselines = BaselineRuns(task, model, job, device)
    channel.report("reference", {"device": device_name(device), "baselines_cached": baselines.timings is not None})
    if baselines.timings is not None:
        channel.report("baselines", baselines.timings)
    handover = socket.socket(fileno=job["handover_fd"])
    handover.settimeout(HANDOVER_TIMEOUT_S)
    cfg = SandboxConfig(backend=job["backend"], tolerance=job["tolerance"])
    while (command := channel.wait_command()).name != "stop":
        if command.name == "compile" and baselines.timings is None:
            channel.report("compiled", baselines.compile())
        elif command.name == "go" and baselines.timings is None:
            channel.report("baselines", baselines.time())
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


def reference_model(task, job: dict, device: torch.device) -> torch.nn.Module:
    """The task's Model under the evaluation's init seed; its weights go to the run worker (``sandbox.weights``)."""
    if not (isinstance(getattr(task, "Model", None), type) and issubclass(task.Model, torch.nn.Module)):
        raise WorkerFailure(TASK_ERROR, "Model is not a torch.nn.Module subclass")
    init_inputs = check_inputs(call_task(task, "get_init_inputs"), "get_init_inputs")
    torch.manual_seed(job["init_seed"])
    try:
        model = task.Model(*init_inputs)
    except Exception as exc:
        raise WorkerFailure(TASK_ERROR, f"Model(*get_init_inputs()) raised {type(exc).__name__}: {exc}") from None
    if job["weights_fd"] is not None:  # None: the baselines flow, no run worker
        write_weights(job["weights_fd"], init_inputs, model)
    return model.to(device)


def check_reproducible_inputs(task, device: torch.device) -> None:
    """Checked calls are recomputed from their seeds: get_inputs() must give the same inputs for
    the same seed (a task drawing from another generator would fail every honest solution).
    Compared by digest, so that only one input set exists at a time."""
    seed = fresh_seed()
    first = inputs_digest(seeded_inputs(task, seed, device))
    if inputs_digest(seeded_inputs(task, seed, device)) != first:
        raise WorkerFailure(TASK_ERROR, "get_inputs() is not reproducible under torch.manual_seed / random.seed")


class BaselineRuns:
    """This worker's baselines: the cache's, or torch.compile's compile work on "compile"
    (untimed; the judge holds the device shared) and the eager and compiled timings on "go"
    (the judge holds it exclusively)."""

    def __init__(self, task, model, job: dict, device: torch.device):
        self.task, self.model, self.job, self.device = task, model, job, device
        self.cache_path = baseline_cache_path(job, device_name(device))
        self.timings = load_baselines(self.cache_path)
        self.compiled: CompiledBaseline | None = None

    def compile(self) -> dict:
        self.compiled = compile_baseline(self.task, self.model, self.device)
        return {"compile_error": self.compiled.error}

    def time(self) -> dict:
        if self.job["compile_baseline"] and self.compiled is None:  # "go" without "compile": compile first
            self.compile()
        self.timings = time_baselines(self.task, self.model, self.job, self.device, self.compiled)
        # A compile that ran out of memory (beside other work, perhaps) is no verdict on the task.
        if not memory_was_full(self.timings["compile_error"]):
            store_baselines(self.cache_path, self.timings)
        return self.timings


@dataclass
class CompiledBaseline:
    """torch.compile's Model, compiled (None when it could not be), and why not."""

    run: Callable | None = None
    error: str | None = None


def compile_baseline(task, model, device: torch.device) -> CompiledBaseline:
    """torch.compile of the Model with its compile work done now, untimed: compilation happens at
    the first call, made here as timed calls are made (fresh inputs, no_grad), so that the timed
    runs later measure compiled code only. Several workers may do this at once."""
    share_inductor_headers()
    try:
        compiled = torch.compile(model)
        with torch.no_grad():
            compiled(*seeded_inputs(task, fresh_seed(), device))
        return CompiledBaseline(compiled)
    except Exception as exc:  # inductor unavailable or the task does not compile
        return CompiledBaseline(error=compile_failure(exc))
    finally:
        release_cached_memory(device)


def time_baselines(task, model, job: dict, device: torch.device, compiled: CompiledBaseline | None) -> dict:
    """The eager and (when compiled) torch.compile timings."""
    cfg = timing_config(job)
    make_inputs = lambda i: seeded_inputs(task, fresh_seed(), device)  # noqa: E731
    eager = measure(lambda inp: model(*inp), make_inputs, cfg, device)
    result = {"eager": TimingStats.from_samples(eager).__dict__, "compile": None,
              "compile_error": compiled.error if compiled else None}
    if compiled and compiled.run is not None:
        try:
            result["compile"] = TimingStats.from_samples(
                measure(lambda inp: compiled.run(*inp), make_inputs, cfg, device)).__dict__
        except Exception as exc:  # a recompilation for the timed calls that failed
            result["compile_error"] = compile_failure(exc)
    release_cached_memory(device)
    return result


def compile_failure(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc)[:500]}"


def share_inductor_headers() -> None:
    """Point inductor's precompiled-header directory at the cache the judge shares between
    reference workers (TORCHINDUCTOR_CACHE_DIR): inductor keeps those headers under
    ``$TMPDIR/torchinductor_<user>`` whatever its cache dir says, and every worker has its own
    TMPDIR, so each compile baseline rebuilt them (~8 s, twice, on the cpu backend)."""
    shared = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not shared:
        return
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        own = Path(default_cache_dir())
        if not own.exists() and not own.is_symlink():
            Path(shared).mkdir(parents=True, exist_ok=True)
            own.parent.mkdir(parents=True, exist_ok=True)
            own.symlink_to(shared, target_is_directory=True)
    except (ImportError, OSError):
        pass  # the headers are then built in the worker's own directory, as before


def release_cached_memory(device: torch.device) -> None:
    """This worker waits on the device while the solution runs: it keeps no cached blocks."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
