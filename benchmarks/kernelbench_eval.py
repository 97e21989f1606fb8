"""KernelBench's ``eval_kernel_against_ref`` (measure_performance and check_for_excessive_speedup
on, cuda_event timing), written anew here to match its current ``src/kernelbench/eval.py`` and
``timing.py``: the sequential baseline of ``bench_kernelbench.py``.

What it does, as KernelBench does it: the task's source and the solution's are exec'd into one
namespace (the solution after a line pointing ``TORCH_EXTENSIONS_DIR`` at its build folder, so its
``load_inline`` builds there); seed 42 before the init inputs and before each model; every tensor
cast to fp32 and moved to the device; 5 correctness trials on seeds drawn from seed 42, shape check,
``allclose(atol=rtol=1e-4)``; then the solution and the reference each timed on one seed-42 input
set: 3 warm-ups, the caching allocator emptied, 1 + 100 trials of (device sync, 256 MiB L2 flush,
events around one call, device sync), the first discarded; mean/std/min/max to 3 significant
digits (ms). On the cpu device (tests) perf_counter stands in for the events.
"""
from __future__ import annotations

import os
import statistics
import time
from typing import Any, Callable

import torch

SEED = 42
CORRECT_TRIALS = 5
PERF_TRIALS = 100
WARMUP = 3
DISCARD_FIRST = 1
FP32_TOLERANCE = 1e-4
L2_FLUSH_SHAPE = (32, 1024, 1024)  # int64: 256 MiB, KernelBench's clear_l2_cache


def set_seed(seed: int) -> None:
    torch.manual_seed(seed)
    torch.cuda.manual_seed(seed)


def to_device(value: Any, device) -> Any:
    """As KernelBench: every tensor cast to fp32 first (integer ones too), then moved."""
    if not isinstance(value, torch.Tensor):
        return value
    return value.to(dtype=torch.float32).to(device=device)


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device=device)


def clear_l2(device) -> None:
    if device.type == "cuda":
        dummy = torch.empty(L2_FLUSH_SHAPE, dtype=torch.int64, device=device)
        dummy.fill_(42)
        del dummy


def time_cuda_events(fn: Callable, args: list, device, num_trials: int = PERF_TRIALS) -> list[float]:
    """KernelBench's cuda_event timing, in ms: warm-ups each followed by a sync, the caching
    allocator emptied, then per trial a device sync, an L2 flush, events around one call and a
    device sync; the first trial is discarded. On the cpu device, perf_counter stands in for events."""
    for _ in range(WARMUP):
        fn(*args)
        sync(device)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    times = []
    for trial in range(num_trials + DISCARD_FIRST):
        sync(device)
        elapsed = _timed_call(fn, args, device)
        if trial >= DISCARD_FIRST:
            times.append(elapsed)
    return times


def _timed_call(fn: Callable, args: list, device) -> float:
    if device.type != "cuda":
        start = time.perf_counter()
        fn(*args)
        return (time.perf_counter() - start) * 1000.0
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    clear_l2(device)
    start.record()
    fn(*args)
    end.record()
    torch.cuda.synchronize(device=device)
    return start.elapsed_time(end)


def timing_stats(times_ms: list[float]) -> dict:
    """KernelBench's get_timing_stats: mean, std, min, max to 3 significant digits (ms)."""
    def sig3(x: float) -> float:
        return float(f"{x:.3g}")

    mean = statistics.fmean(times_ms)
    std = statistics.pstdev(times_ms)
    return {"mean": sig3(mean), "std": sig3(std), "min": sig3(min(times_ms)), "max": sig3(max(times_ms)),
            "num_trials": len(times_ms), "mean_unrounded": mean, "median": statistics.median(times_ms)}


def check_correctness(ref, new, get_inputs: Callable, device, trials: int = CORRECT_TRIALS) -> dict:
    """run_and_check_correctness: trial seeds drawn from seed 42, per trial inputs from that seed,
    reference then solution, shape check, allclose at the fp32 tolerance. Raises what the
    solution raises (the caller records it as a runtime error)."""
    torch.manual_seed(SEED)
    seeds = [torch.randint(0, 2 ** 32 - 1, (1,)).item() for _ in range(trials)]
    passed, diffs = 0, []
    with torch.no_grad():
        for seed in seeds:
            set_seed(seed)
            inputs = [to_device(x, device) for x in get_inputs()]
            set_seed(seed)  # KernelBench re-seeds before each model's .to(): forward starts from it
            expected = ref(*inputs)
            sync(device)
            got = new(*inputs)
            sync(device)
            if expected.shape != got.shape:
                return {"verdict": "shape_mismatch", "detail": f"expected {tuple(expected.shape)}, got {tuple(got.shape)}"}
            if torch.allclose(expected, got, atol=FP32_TOLERANCE, rtol=FP32_TOLERANCE):
                passed += 1
            else:
                diffs.append(float(torch.max(torch.abs(expected - got)).item()))
            del inputs, expected, got
    verdict = "correct" if passed == trials else "mismatch"
    return {"verdict": verdict, "trials_passed": passed, "max_abs_diff": max(diffs) if diffs else None}


def evaluate(task_src: str, solution_src: str, build_dir: str, device, task_name: str = "<task>",
             solution_name: str = "<solution>") -> dict:
    """One eval_kernel_against_ref(measure_performance=True, check_for_excessive_speedup=True):
    a dict with the verdict, its detail, the timing stats and the seconds of each stage."""
    out: dict[str, Any] = {"stages": {}}
    context: dict[str, Any] = {}
    steps = (("reference_init", lambda: _load_reference(task_src, task_name, context, device)),
             ("build", lambda: _build(solution_src, solution_name, build_dir, context, device)),
             ("model_to_device", lambda: _instantiate(context, device)))
    for stage, step in steps:
        clock = time.monotonic()
        failure = step()
        out["stages"][stage] = time.monotonic() - clock
        if failure:
            return dict(out, verdict=failure[0], detail=failure[1])
    ref, new, get_inputs = context["ref"], context["new"], context["get_inputs"]
    clock = time.monotonic()
    try:
        out.update(check_correctness(ref, new, get_inputs, device))
    except Exception as exc:
        out.update(verdict="runtime_error", detail=short_error(exc))
    out["stages"]["correctness"] = time.monotonic() - clock
    if out["verdict"] == "correct":
        _timed_stage(out, "runtime", "timing", new, get_inputs, device)
    # KernelBench times the reference whatever the verdict (its excessive-speedup check).
    _timed_stage(out, "ref_runtime", "reference_timing", ref, get_inputs, device)
    return out


def _load_reference(task_src: str, task_name: str, context: dict, device):
    """The task exec'd into the shared namespace; seed 42 for the init inputs and the weights."""
    try:
        exec(compile(task_src, task_name, "exec"), context)
        set_seed(SEED)
        context["init_inputs"] = [to_device(x, device) for x in context["get_init_inputs"]()]
        with torch.no_grad():
            set_seed(SEED)
            context["ref"] = context["Model"](*context["init_inputs"])
    except Exception as exc:
        return "task_error", short_error(exc)
    return None


def _build(solution_src: str, solution_name: str, build_dir: str, context: dict, device):
    """The solution exec'd into the same namespace, its extensions built into build_dir."""
    os.environ["TORCH_USE_CUDA_DSA"] = "1"
    prefix = f"import os\nos.environ['TORCH_EXTENSIONS_DIR'] = {build_dir!r}\n"
    try:
        exec(compile(prefix + solution_src, solution_name, "exec"), context)
        context["ModelNew"]  # KeyError when the solution defines none
        sync(device)
    except Exception as exc:
        return "compile_error", short_error(exc)
    return None


def _instantiate(context: dict, device):
    """ModelNew from seed 42, both models cast to fp32 and moved to the device."""
    try:
        with torch.no_grad():
            set_seed(SEED)
            new = context["ModelNew"](*context["init_inputs"])
            context["ref"] = context["ref"].to(device=device, dtype=torch.float32)
            context["new"] = new.to(device=device, dtype=torch.float32)
            sync(device)
    except RuntimeError as exc:
        return "load_error", short_error(exc)
    return None


def _timed_stage(out: dict, key: str, stage: str, model, get_inputs: Callable, device) -> None:
    """A timing failure is recorded beside the verdict, as KernelBench's metadata keeps it."""
    clock = time.monotonic()
    try:
        out[key] = timing_stats(_time_model(model, get_inputs, device))
    except Exception as exc:
        out.setdefault("timing_errors", {})[key] = short_error(exc)
    out["stages"][stage] = time.monotonic() - clock


def _time_model(model, get_inputs: Callable, device) -> list[float]:
    """As KernelBench times both models: one input set from seed 42, no torch.no_grad."""
    sync(device)
    set_seed(SEED)
    inputs = [to_device(x, device) for x in get_inputs()]
    sync(device)
    return time_cuda_events(model, inputs, device)


def cleanup(device) -> None:
    """graceful_eval_cleanup: empty the caching allocator, reset peak stats, sync."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device=device)
        torch.cuda.synchronize(device=device)


def short_error(exc: BaseException, limit: int = 600) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= limit else text[:limit] + "..."
