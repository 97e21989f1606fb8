"""One call procedure and one timing method for solutions and baselines alike.

Every call of a forward goes through ``Caller``: verified trials, warm-up and timed runs are
made the same way, so a solution cannot tell them apart by how it is called.
CUDA: warm-up, then per timed run a fresh input set, an L2 flush, a device-wide sync, and
CUDA events. Work a solution leaves running on other streams after ``forward`` returns still
counts: after the end event on the current stream we synchronise the whole device and record
a second event; the gap between the two beyond its usual size (the host's sync latency, measured
first with no work at all) is added to the run.
CPU: wall clock around ``forward`` with a fixed thread count.
"""
from __future__ import annotations

import time
import types
from dataclasses import dataclass
from typing import Any, Callable

import torch

from .config import TimingConfig

# The clocks, bound when the harness is imported, i.e. before any solution code: a solution that
# replaces time.perf_counter or torch.cuda.Event afterwards does not change these. Replacing
# them here (or methods of the Event class) is caught by ``tampered_harness``.
_perf_counter = time.perf_counter
_Event = torch.cuda.Event
_synchronize = torch.cuda.synchronize
_TIMING_CALLABLES = {
    "sandbox.timing._perf_counter": lambda: _perf_counter,
    "sandbox.timing._Event": lambda: _Event,
    "sandbox.timing._synchronize": lambda: _synchronize,
    "torch.cuda.Event.record": lambda: _Event.record,
    "torch.cuda.Event.elapsed_time": lambda: _Event.elapsed_time,
    "time.perf_counter": lambda: time.perf_counter,
    "torch.cuda.synchronize": lambda: torch.cuda.synchronize,
}

# Version of the call procedure: a change of what a timed run measures invalidates cached baselines
# (2: every call on input tensors refilled in place, see ``Caller``).
METHOD_VERSION = 2
# Bytes overwritten between timed runs; several times the L2 of current GPUs (H100/H200: 50-60 MB).
L2_FLUSH_BYTES = 256 * 1024 * 1024
# Upper bound on warm-up runs however short the kernel (warmup_ms would otherwise mean thousands).
MAX_WARMUP_RUNS = 1000
# Runs with no work used to learn the device-sync latency.
SYNC_CALIBRATION_RUNS = 30


@dataclass
class Call:
    """One call of a forward: its runtime, what it returned, and the input tensors it was given.
    Mutable: a hand-over sets ``output`` to None once it copied it, so that no frame of the
    harness keeps a checked output alive while it is checked (device memory: issue 16)."""

    runtime_us: float
    output: Any
    inputs: list


class Caller:
    """The one procedure for every call of a forward: the verified trials, the warm-up and the
    timed runs of a solution (and the baselines' calls), so that nothing a solution can observe
    tells them apart. Each call: a fresh input set copied into the same input tensors (same
    addresses, strides and storage offsets every time), the L2 flushed (CUDA), the device
    synchronised, the events or the clock around ``run``, under ``torch.no_grad`` on the calling
    thread and the current stream. What happens to the output is the caller's business, after
    the call has returned."""

    def __init__(self, run: Callable[[list], Any], make_inputs: Callable[[int], list], cfg: TimingConfig,
                 device: torch.device):
        self.run, self.make_inputs, self.device = run, make_inputs, device
        self.cuda = device.type == "cuda"
        self.buffers: list | None = None
        self.calls = 0
        if not self.cuda:
            torch.set_num_threads(cfg.cpu_threads)
            return
        self.flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device=device) if cfg.flush_l2 else None
        self.events = [_Event(enable_timing=True) for _ in range(3)]
        self.sync_gap = _sync_gap_threshold(self.events)

    def __call__(self, fresh: bool = True) -> Call:
        """Call ``run`` once, on a new input set unless ``fresh`` is False (and one exists)."""
        if fresh or self.buffers is None:
            self.buffers = refill(self.buffers, self.make_inputs(self.calls), self.device)
        self.calls += 1
        with torch.no_grad():
            if not self.cuda:
                start = _perf_counter()
                out = self.run(self.buffers)
                return Call((_perf_counter() - start) * 1e6, out, self.buffers)
            if self.flush is not None:
                self.flush.zero_()
            on_stream, out = _timed_cuda_run(self.run, self.buffers, self.events)
            total = self.events[0].elapsed_time(self.events[2]) * 1e3
            return Call(on_stream + max(0.0, (total - on_stream) - self.sync_gap), out, self.buffers)


def refill(buffers: list | None, inputs: list, device: torch.device) -> list:
    """Copy a new input set into the previous call's tensors: same addresses, new content, so a
    kernel that caches or skips work by input pointer or shape returns stale results, and every
    call sees input tensors alike. The first set (or one of another layout) becomes the buffers."""
    same_layout = buffers is not None and len(buffers) == len(inputs) and all(
        isinstance(b, torch.Tensor) and isinstance(x, torch.Tensor) and b.shape == x.shape and b.dtype == x.dtype
        and b.stride() == x.stride()
        for b, x in zip(buffers, inputs) if isinstance(b, torch.Tensor) or isinstance(x, torch.Tensor))
    if not same_layout:
        return [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]
    for b, x in zip(buffers, inputs):
        if isinstance(b, torch.Tensor):
            b.copy_(x)
    return [b if isinstance(b, torch.Tensor) else x for b, x in zip(buffers, inputs)]


def measure(run: Callable[[list], Any], make_inputs: Callable[[int], list], cfg: TimingConfig,
            device: torch.device) -> list[float]:
    """Return ``cfg.repeats`` runtimes in microseconds of ``run(inputs)``."""
    return timed_runs(Caller(run, make_inputs, cfg, device), cfg)


def timed_runs(call: Caller, cfg: TimingConfig, after_timed: Callable[[int, Call], None] | None = None
               ) -> list[float]:
    """Warm up (by count and by time), then collect ``cfg.repeats`` samples; ``after_timed(i,
    call)`` sees each timed run once it has returned (the spot checks draw there)."""
    first = call.calls
    warm_until = _perf_counter() + cfg.warmup_ms / 1e3
    i = 0
    while i < cfg.warmup or (_perf_counter() < warm_until and i < MAX_WARMUP_RUNS):
        call(fresh=cfg.fresh_inputs or call.calls == first)
        i += 1
    samples = []
    for r in range(cfg.repeats):
        result = call(fresh=cfg.fresh_inputs or call.calls == first)
        samples.append(result.runtime_us)
        if after_timed is not None:
            after_timed(r, result)
        del result  # no output outlives its call (the device's memory looks the same in every call)
    return samples


def _timed_cuda_run(run, inputs, events) -> tuple[float, Any]:
    start, end_stream, end_device = events
    _synchronize()
    start.record()
    out = run(inputs)
    end_stream.record()
    _synchronize()  # waits for every stream, not only the current one
    end_device.record()
    _synchronize()
    return start.elapsed_time(end_stream) * 1e3, out


def _sync_gap_threshold(events) -> float:
    """90th percentile of (device-wide end - stream end) with nothing running, in us."""
    gaps = []
    for _ in range(SYNC_CALIBRATION_RUNS):
        on_stream, _ = _timed_cuda_run(lambda _: None, [], events)
        gaps.append(events[0].elapsed_time(events[2]) * 1e3 - on_stream)
    gaps.sort()
    return gaps[int(0.9 * (len(gaps) - 1))]


def harness_fingerprint(modules: list) -> dict[str, int]:
    """Identity of every callable the timing and the in-process verdict depend on: the clocks,
    and each function and class a module's namespace holds (its own or imported: a replaced
    import changes what the module calls), each method of its own classes, and their code
    objects. Taken before solution code runs."""
    prints = {name: id(get()) for name, get in _TIMING_CALLABLES.items()}
    for module in modules:
        for name, obj in vars(module).items():
            if not callable(obj) or isinstance(obj, types.ModuleType):
                continue
            members = []
            if isinstance(obj, type) and obj.__module__ == module.__name__:
                members = [(f"{name}.{k}", v) for k, v in vars(obj).items() if _is_behaviour(v)]
            for qualname, item in [(name, obj), *members]:
                prints[f"{module.__name__}.{qualname}"] = id(item)
                code = getattr(getattr(item, "__func__", item), "__code__", None)
                if code is not None:
                    prints[f"{module.__name__}.{qualname}.__code__"] = id(code)
    return prints


def _is_behaviour(member) -> bool:
    """Methods in any wrapping (classmethods are not callable themselves)."""
    return callable(member) or isinstance(member, (classmethod, staticmethod, property))


def tampered_harness(before: dict[str, int], modules: list, _fingerprint=harness_fingerprint) -> list[str]:
    """Names of callables replaced since ``before`` was taken (the fingerprint function is bound
    as a default argument: replacing the module's copy does not change this check)."""
    now = _fingerprint(modules)
    return [name for name, ident in before.items() if now.get(name) != ident]
