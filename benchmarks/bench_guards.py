"""Guard overhead: the same solution judged with the guards on and off, alternately.

Reports, per setting, the median wall time of a whole evaluation and of its verify and timing
stages, and the runtime the solution was measured at (the guards must not change it: they watch
the verification trials, not the timed runs). Builds and baselines are cached by a first,
untimed evaluation.

Launch lines:
  CPU:    python benchmarks/bench_guards.py --backend cpu --rounds 5 --out guards_cpu.json
  1 GPU:  python benchmarks/bench_guards.py --backend cuda --rounds 5 --out guards_cuda.json
  N GPUs: one evaluation uses one GPU; pick it with CUDA_VISIBLE_DEVICES.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sandbox import SandboxConfig, evaluate  # noqa: E402

EXAMPLES = ROOT / "examples"
CASES = {
    "cpu": [("relu_add", "relu_add_workspace")],
    "cuda": [("relu_add", "relu_add_workspace"), ("linear_relu", "linear_relu_cublas")],
}


def judge(task: Path, solution: Path, backend: str, guards: bool) -> dict:
    cfg = SandboxConfig(backend=backend, guards=guards)
    start = time.monotonic()
    m = evaluate(task, solution, cfg)
    if not m.correct:
        raise SystemExit(f"{solution.name} (guards={guards}) failed: {m.error}: {(m.error_detail or '')[:500]}")
    return {"wall_s": time.monotonic() - start, "verify_s": m.stage_seconds.get("verify", 0.0),
            "timing_s": m.stage_seconds.get("timing", 0.0), "runtime_us": m.runtime_us}


def summarise(samples: list[dict]) -> dict:
    return {key: {"median": statistics.median(s[key] for s in samples),
                  "min": min(s[key] for s in samples), "max": max(s[key] for s in samples)}
            for key in samples[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--rounds", type=int, default=5, help="evaluations per setting and case")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    report = {}
    for task_name, solution_name in CASES[args.backend]:
        task = EXAMPLES / "tasks" / f"{task_name}.py"
        solution = EXAMPLES / "solutions" / args.backend / solution_name
        judge(task, solution, args.backend, True)  # build and baselines into the cache
        samples = {True: [], False: []}
        for _ in range(args.rounds):
            for guards in (True, False):
                samples[guards].append(judge(task, solution, args.backend, guards))
        on, off = summarise(samples[True]), summarise(samples[False])
        report[solution_name] = {
            "guards_on": on, "guards_off": off,
            "overhead_wall_s": on["wall_s"]["median"] - off["wall_s"]["median"],
            "overhead_verify_s": on["verify_s"]["median"] - off["verify_s"]["median"],
        }
        print(json.dumps({solution_name: report[solution_name]}, indent=1), file=sys.stderr)
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
