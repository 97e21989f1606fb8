"""Sandbox benchmark: build times of both solution forms and run-to-run timing spread.

Measures, on one backend:
  1. single-file (KernelBench style) load_inline build, cold (empty extension dir);
  2. workspace-form build, cold (empty object cache), then a kernel-only edit (one kernel file
     changed, binding objects reused) and an unchanged rebuild (every object cached);
  3. run-to-run spread: the same kernel judged several times end to end (baselines cached
     after the first), reporting each evaluation's median runtime.

Launch lines:
  CPU:    python benchmarks/bench_sandbox.py --backend cpu --out bench_cpu.json
  1 GPU:  python benchmarks/bench_sandbox.py --backend cuda --out bench_cuda.json
  N GPUs: the sandbox judges on one GPU at a time; pick it with CUDA_VISIBLE_DEVICES.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sandbox import SandboxConfig, evaluate  # noqa: E402
from sandbox.build import build_workspace, make_toolchain  # noqa: E402
from sandbox.solution import materialise, read_solution  # noqa: E402

EXAMPLES = ROOT / "examples"


def time_single_file_build(backend: str, work: Path, arch: str | None) -> float:
    """Seconds to import the load_inline example in a fresh process with an empty extension dir."""
    ext_dir = work / "torch_extensions"
    shutil.rmtree(ext_dir, ignore_errors=True)
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=str(ext_dir), MAX_JOBS="4")
    if arch:
        env["TORCH_CUDA_ARCH_LIST"] = arch
    src = EXAMPLES / "solutions" / backend / "relu_add_inline.py"
    code = ("import importlib.util, time; t = time.perf_counter(); "
            f"s = importlib.util.spec_from_file_location('m', {str(src)!r}); "
            "m = importlib.util.module_from_spec(s); s.loader.exec_module(m); "
            "print(time.perf_counter() - t)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def time_workspace_builds(backend: str, work: Path, arch: str | None, edits: int) -> dict:
    cfg = SandboxConfig(backend=backend)
    ws = work / "ws"
    solution = read_solution(EXAMPLES / "solutions" / backend / "relu_add_workspace")
    materialise(solution, (EXAMPLES / "tasks" / "relu_add.py").read_text(), ws)
    cache = work / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    tc = make_toolchain(backend, arch, cfg.cxx_flags, cfg.nvcc_flags)
    cold = build_workspace(ws, ws / "build", tc, cache, jobs=cfg.build_jobs)
    kernel = next(p for p in (ws / "kernels").iterdir() if p.suffix in (".cu", ".cpp") and "_binding" not in p.name)
    original = kernel.read_text()
    edit_times = []
    for i in range(edits):
        kernel.write_text(original + f"\n// edit {i} {time.time_ns()}\n")
        report = build_workspace(ws, ws / "build", tc, cache, jobs=cfg.build_jobs)
        assert report.compiled == [kernel.name], report.compiled
        edit_times.append(report.seconds)
    unchanged = build_workspace(ws, ws / "build", tc, cache, jobs=cfg.build_jobs)
    assert unchanged.compiled == []
    return {"workspace_cold_s": cold.seconds, "kernel_edit_s": edit_times, "unchanged_rebuild_s": unchanged.seconds}


def time_spread(backend: str, work: Path, runs: int) -> dict:
    cfg = SandboxConfig(backend=backend, cache_dir=str(work / "eval-cache"))
    medians, walls, details = [], [], []
    for _ in range(runs):
        start = time.perf_counter()
        m = evaluate(EXAMPLES / "tasks" / "relu_add.py", EXAMPLES / "solutions" / backend / "relu_add_workspace", cfg)
        walls.append(time.perf_counter() - start)
        if not m.correct:
            raise SystemExit(f"example solution failed: {m.error}: {m.error_detail}")
        medians.append(m.runtime_us)
        details.append({"runtime": m.runtime_stats.__dict__, "eager_us": m.eager_us, "compile_us": m.compile_us,
                        "device": m.device, "stage_seconds": m.stage_seconds})
    return {"runtime_medians_us": medians, "evaluate_wall_s": walls, "evaluations": details}


def cuda_arch(backend: str) -> str | None:
    if backend != "cuda":
        return None
    import torch

    major, minor = torch.cuda.get_device_capability(0)
    return f"{major}.{minor}"


def summarise(results: dict) -> str:
    rows = []
    if "kernel_edit_s" in results:
        edits = results["kernel_edit_s"]
        rows += [
            ("single-file load_inline build, cold", f"{results['single_file_cold_s']:.1f} s"),
            ("workspace build, cold", f"{results['workspace_cold_s']:.1f} s"),
            ("workspace kernel-only edit (median of %d)" % len(edits),
             f"{statistics.median(edits):.2f} s (min {min(edits):.2f}, max {max(edits):.2f})"),
            ("workspace unchanged rebuild (relink only)", f"{results['unchanged_rebuild_s']:.2f} s"),
        ]
    if "runtime_medians_us" in results:
        med = results["runtime_medians_us"]
        first = results["evaluations"][0]
        rows += [
            ("runtime median per evaluation (%d evaluations)" % len(med),
             f"{statistics.median(med):.1f} us (min {min(med):.1f}, max {max(med):.1f}, "
             f"spread {(max(med) - min(med)) / statistics.median(med) * 100:.1f}%)"),
            ("eager / torch.compile baseline", f"{first['eager_us']:.1f} us / {first['compile_us']:.1f} us"),
            ("evaluate wall time, build cached",
             f"{statistics.median(results['evaluate_wall_s'][1:] or results['evaluate_wall_s']):.1f} s"),
        ]
    return "\n".join(f"| {k} | {v} |" for k, v in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["cpu", "cuda"], required=True)
    parser.add_argument("--edits", type=int, default=5, help="kernel-only edits to time")
    parser.add_argument("--runs", type=int, default=5, help="evaluations of the same kernel for the spread")
    parser.add_argument("--parts", default="builds,spread", help="comma list of: builds, spread")
    parser.add_argument("--out", default="", help="write all numbers as JSON here")
    args = parser.parse_args()
    arch = cuda_arch(args.backend)
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as tmp:
        work = Path(tmp)
        results = {"backend": args.backend, "date": time.strftime("%Y-%m-%d %H:%M:%S"), "arch": arch}
        if "builds" in args.parts:
            print("single-file build ...", file=sys.stderr)
            results["single_file_cold_s"] = time_single_file_build(args.backend, work, arch)
            print("workspace builds ...", file=sys.stderr)
            results.update(time_workspace_builds(args.backend, work, arch, args.edits))
        if "spread" in args.parts:
            print("timing spread ...", file=sys.stderr)
            results.update(time_spread(args.backend, work, args.runs))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    print(summarise(results))


if __name__ == "__main__":
    main()
