"""Pool benchmark: N distinct correct solutions through the sandbox pool, against a sequential
in-process KernelBench-style loop (load_inline, verify, time, one at a time), same run.

Solutions are variants of examples/solutions/<backend>/relu_add_* (block size, grid cap and a
variant number in a comment), so every one compiles anew: no build-cache hits. Before timing,
one extra variant warms the pool's caches the way a long run does (the fixed binding's objects
and the task's baselines); the sequential loop gets the same courtesy (baseline timed once).

Reports evaluations per hour for both, their ratio, the device-lane busy fraction (and GPU
utilisation sampled by nvidia-smi where present), the build-time share, and per-solution
results. ``--devices-sweep 1,2`` repeats the pool run with 1, then 2 GPUs (fresh variants each)
and adds a fixed kernel judged repeatedly in each run, to compare timing spread alone and side
by side.

Launch lines:
  CPU:    python benchmarks/bench_pool.py --backend cpu --n 24 --sequential 2 --out pool_cpu.json
  1 GPU:  python benchmarks/bench_pool.py --backend cuda --n 48 --sequential 3 --out pool_cuda.json
  N GPUs: python benchmarks/bench_pool.py --backend cuda --n 48 --sequential 0 --devices-sweep 1,2 \\
              --fixed 16 --fixed-elements 268435456 --out pool_multi.json
              (lanes = the first k entries of CUDA_VISIBLE_DEVICES; the fixed kernel ~1 ms)
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sandbox import SandboxConfig  # noqa: E402
from sandbox.pool import EvalRequest, SandboxPool, visible_devices  # noqa: E402

EXAMPLES = ROOT / "examples"
TASK = EXAMPLES / "tasks" / "relu_add.py"
THREADS = (128, 256, 512, 1024)
GRID_CAPS = (4, 8, 16, 32)
# Floats per input in relu_add.py as written (N = 1 << 22).
TASK_ELEMENTS = 1 << 22


def scaled_task(elements: int, dest: Path) -> Path:
    """relu_add over ``elements`` floats per input, for the fixed kernel: at the default 4M it
    runs ~35 us and is launch-bound, so its spread follows host load and hides any cross-GPU
    effect; at 256M (~1 ms on an H200) the device's own time dominates."""
    text = TASK.read_text()
    if "N = 1 << 22" not in text:
        raise SystemExit(f"{TASK} no longer sets N = 1 << 22; update scaled_task and TASK_ELEMENTS")
    dest.write_text(text.replace("N = 1 << 22", f"N = {elements}"))
    return dest


def workspace_variant(backend: str, index: int, dest: Path) -> Path:
    """The relu_add workspace with its launch shape (cuda) and a comment varied by ``index``."""
    src = EXAMPLES / "solutions" / backend / "relu_add_workspace"
    shutil.copytree(src, dest)
    kernel = next((dest / "kernels").glob("relu_add.c*"))
    text = kernel.read_text()
    if backend == "cuda":
        text = text.replace("const int threads = 256;", f"const int threads = {THREADS[index % 4]};")
        text = text.replace("132 * 16", f"132 * {GRID_CAPS[(index // 4) % 4]}")
    kernel.write_text(f"// variant {index}\n{text}")
    return dest


def inline_variant(backend: str, index: int, dest: Path) -> Path:
    """The single-file load_inline example with a unique extension name and launch shape."""
    text = (EXAMPLES / "solutions" / backend / "relu_add_inline.py").read_text()
    text = re.sub(r'name="([a-z_]+)"', lambda m: f'name="{m.group(1)}_v{index}"', text)
    text = text.replace("const int threads = 256;", f"const int threads = {THREADS[index % 4]};")
    dest.write_text(f"# variant {index}\n{text}")
    return dest


# ---------------------------------------------------------------- the pool

class GpuSampler:
    """Mean GPU utilisation from nvidia-smi while the pool runs (None without nvidia-smi)."""

    def __init__(self, devices: list[str]):
        self.samples: list[float] = []
        self.proc = None
        if shutil.which("nvidia-smi") and devices and devices != ["-"]:
            self.proc = subprocess.Popen(
                ["nvidia-smi", f"--id={','.join(devices)}", "--query-gpu=utilization.gpu",
                 "--format=csv,noheader,nounits", "-lms", "200"], stdout=subprocess.PIPE, text=True)
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                self.samples.append(float(line.strip()))
            except ValueError:
                pass

    def stop(self) -> float | None:
        if self.proc is None:
            return None
        self.proc.terminate()
        return statistics.mean(self.samples) if self.samples else None


def run_pool(cfg: SandboxConfig, solutions: list[Path], devices: list[str], fixed: list[Path],
             fixed_task: Path = TASK) -> dict:
    from tqdm import tqdm

    pool = SandboxPool(cfg, devices=devices)
    warm = pool.submit(EvalRequest("warm-up", TASK, solutions[0])).result()
    assert warm.measurement and warm.measurement.correct, warm
    pool.lanes.busy_s.clear()
    pool.lanes.build_s = 0.0
    requests = [EvalRequest(f"v{i}", TASK, s) for i, s in enumerate(solutions[1:], start=1)]
    requests += [EvalRequest(f"fixed{i}", fixed_task, s) for i, s in enumerate(fixed)]
    sampler = GpuSampler(devices)
    start = time.monotonic()
    results = []
    with tqdm(total=len(requests), unit="eval", file=sys.stderr) as bar:
        for result in pool.map(requests):
            results.append(result)
            bar.update(1)
    wall = time.monotonic() - start
    utilisation = sampler.stop()
    pool.close()
    ms = [r.measurement for r in results if r.measurement]
    eval_seconds = sum(sum(m.stage_seconds.values()) for m in ms)
    fixed_runtimes = [r.measurement.runtime_us for r in results if r.id.startswith("fixed") and r.measurement.correct]
    return {
        "devices": devices, "evaluations": len(requests), "correct": sum(m.correct for m in ms),
        "errors": sorted({f"{m.error}: {(m.error_detail or '')[:200]}" for m in ms if m.error}),
        "wall_s": wall, "evals_per_hour": len(requests) / wall * 3600,
        "lane_busy_fraction": sum(pool.lanes.busy_s.values()) / (wall * len(devices)),
        "gpu_utilisation_mean_pct": utilisation,
        "build_share": sum(m.stage_seconds.get("build", 0.0) for m in ms) / eval_seconds if eval_seconds else None,
        "builds_s_median": statistics.median(m.stage_seconds.get("build", 0.0) for m in ms),
        "stage_s_median": {stage: statistics.median(m.stage_seconds.get(stage, 0.0) for m in ms)
                           for stage in ("build", "reference", "baselines", "verify", "timing")} if ms else {},
        "cpu_plan": {"lanes": pool.lanes.cpus.lanes, "build_cores": len(pool.lanes.cpus.builds),
                     "unpinned_because": pool.lanes.unpinned_because},
        "fixed_kernel_runtime_us": fixed_runtimes,
        "fixed_kernel_spread": spread(fixed_runtimes),
        "runtime_us": {r.id: r.measurement.runtime_us for r in results if r.measurement},
    }


def spread(values: list[float]) -> dict | None:
    if len(values) < 2:
        return None
    median = statistics.median(values)
    return {"median_us": median, "range_pct": (max(values) - min(values)) / median * 100,
            "cv_pct": statistics.stdev(values) / statistics.mean(values) * 100}


# ---------------------------------------------------------------- the sequential loop

def run_sequential(backend: str, solutions: list[Path], work: Path, cfg: SandboxConfig) -> dict:
    """KernelBench's loop, in this process: build with load_inline, check 5 input sets with
    allclose(atol=rtol=1e-2), time with the sandbox's own timing method."""
    import torch

    from sandbox.timing import measure

    device = torch.device("cuda" if backend == "cuda" else "cpu")
    task = _load(TASK, "bench_task")
    torch.manual_seed(0)
    reference = task.Model(*task.get_init_inputs()).to(device)

    def make_inputs(seed: int) -> list:
        torch.manual_seed(seed)
        return [x.to(device) for x in task.get_inputs()]

    eager = statistics.median(measure(lambda inp: reference(*inp), make_inputs, cfg.timing, device))
    per_solution = []
    for index, path in enumerate(solutions):
        os.environ["TORCH_EXTENSIONS_DIR"] = str(work / f"ext{index}")
        start = time.monotonic()
        module = _load(path, f"bench_solution_{index}")
        built = time.monotonic()
        model = module.ModelNew(*task.get_init_inputs()).to(device)
        with torch.no_grad():
            correct = all(torch.allclose(model(*make_inputs(100 + t)), reference(*make_inputs(100 + t)),
                                         atol=1e-2, rtol=1e-2) for t in range(5))
        runtime = statistics.median(measure(lambda inp: model(*inp), make_inputs, cfg.timing, device))
        per_solution.append({"build_s": built - start, "total_s": time.monotonic() - start,
                             "correct": correct, "runtime_us": runtime})
        print(f"sequential {index}: {per_solution[-1]}", file=sys.stderr)
    mean_s = statistics.mean(p["total_s"] for p in per_solution)
    return {"solutions": len(per_solution), "eager_us": eager, "per_solution": per_solution,
            "mean_s_per_eval": mean_s, "evals_per_hour": 3600 / mean_s,
            "build_share": sum(p["build_s"] for p in per_solution) / sum(p["total_s"] for p in per_solution)}


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- main

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--n", type=int, default=48, help="distinct solutions through the pool (>= 24)")
    parser.add_argument("--sequential", type=int, default=3, help="solutions through the sequential loop")
    parser.add_argument("--fixed", type=int, default=8, help="judgements of one fixed kernel (timing spread)")
    parser.add_argument("--fixed-elements", type=int, default=TASK_ELEMENTS,
                        help="floats per input of the fixed kernel's task (1<<28: ~1 ms on an H200)")
    parser.add_argument("--devices-sweep", default="", help="e.g. 1,2: pool runs on the first k devices")
    parser.add_argument("--form", choices=["workspace", "inline"], default="workspace",
                        help="solution form sent through the pool")
    parser.add_argument("--lane-cpus", type=int, default=SandboxConfig.lane_cpus,
                        help="host cores reserved per device lane (0: no pinning)")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-pool-"))
    make = workspace_variant if args.form == "workspace" else inline_variant
    suffix = "" if args.form == "workspace" else ".py"
    devices = visible_devices(args.backend)
    sweep = [int(k) for k in args.devices_sweep.split(",") if k] or [len(devices)]
    report: dict = {"backend": args.backend, "form": args.form, "n": args.n, "pool": []}
    offset = 0
    fixed_task = TASK if args.fixed_elements == TASK_ELEMENTS else scaled_task(args.fixed_elements, work / "relu_add_fixed.py")
    report["fixed_elements"] = args.fixed_elements
    for k in sweep:
        cfg = SandboxConfig(backend=args.backend, cache_dir=str(work / f"cache-{k}"), lane_cpus=args.lane_cpus)
        solutions = [make(args.backend, offset + i, work / f"sol{offset + i}{suffix}") for i in range(args.n + 1)]
        fixed = [solutions[1]] * args.fixed
        offset += args.n + 1
        result = run_pool(cfg, solutions, devices[:k], fixed, fixed_task)
        print(json.dumps({key: v for key, v in result.items() if key != "runtime_us"}, indent=1), file=sys.stderr)
        report["pool"].append(result)
    if args.sequential:
        solutions = [inline_variant(args.backend, 1000 + i, work / f"seq{i}.py") for i in range(args.sequential)]
        report["sequential"] = run_sequential(args.backend, solutions, work, SandboxConfig(backend=args.backend))
        report["speedup_pool_vs_sequential"] = report["pool"][-1]["evals_per_hour"] / report["sequential"]["evals_per_hour"]
    if len(report["pool"]) > 1:
        report["scaling"] = report["pool"][-1]["evals_per_hour"] / report["pool"][0]["evals_per_hour"]
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
