"""Guard and spot-check overhead: the same solution judged under two settings, alternately.

``--compare guards`` (default): the guards on and off. ``--compare spot_checks``: the default
chance of checking a timed run's output against the reference (timing.spot_check_probability)
against none. Reports, per setting, the median (min, max) wall time of a whole evaluation and of
its stages (verify: the solution's verified trials; check: the reference recomputed and compared
for trials; timing; spot_checks: copying the kept timed outputs, recomputing and comparing them),
the number of timed runs checked, and the runtime the solution was measured at (neither setting
may change it). Builds and baselines are cached by a first, untimed evaluation.

Launch lines:
  CPU:    python benchmarks/bench_guards.py --backend cpu --compare spot_checks --rounds 5 --out spot_cpu.json
  1 GPU:  python benchmarks/bench_guards.py --backend cuda --compare spot_checks --rounds 5 --out spot_cuda.json
          python benchmarks/bench_guards.py --backend cuda --rounds 5 --out guards_cuda.json
  N GPUs: one evaluation uses one GPU; pick it with CUDA_VISIBLE_DEVICES.
"""
from __future__ import annotations

import argparse
import dataclasses
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
STAGES = ("verify", "check", "timing", "spot_checks")


def settings(compare: str, backend: str) -> dict[str, SandboxConfig]:
    """The two configurations compared, first the one whose cost is measured."""
    base = SandboxConfig(backend=backend)
    if compare == "guards":
        return {"guards_on": base, "guards_off": dataclasses.replace(base, guards=False)}
    off = dataclasses.replace(base.timing, spot_check_probability=0.0)
    return {"spot_checks_default": base, "spot_checks_off": dataclasses.replace(base, timing=off)}


def judge(task: Path, solution: Path, cfg: SandboxConfig) -> dict:
    start = time.monotonic()
    m = evaluate(task, solution, cfg)
    if not m.correct:
        raise SystemExit(f"{solution.name} failed: {m.error}: {(m.error_detail or '')[:500]}")
    sample = {"wall_s": time.monotonic() - start, "runtime_us": m.runtime_us, "spot_checks": m.spot_checks}
    sample.update({f"{stage}_s": m.stage_seconds.get(stage, 0.0) for stage in STAGES})
    return sample


def summarise(samples: list[dict]) -> dict:
    return {key: {"median": statistics.median(s[key] for s in samples),
                  "min": min(s[key] for s in samples), "max": max(s[key] for s in samples)}
            for key in samples[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--compare", choices=["guards", "spot_checks"], default="guards")
    parser.add_argument("--rounds", type=int, default=5, help="evaluations per setting and case")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    configs = settings(args.compare, args.backend)
    (measured, measured_cfg), (baseline, _) = configs.items()
    report = {}
    for task_name, solution_name in CASES[args.backend]:
        task = EXAMPLES / "tasks" / f"{task_name}.py"
        solution = EXAMPLES / "solutions" / args.backend / solution_name
        judge(task, solution, measured_cfg)  # build and baselines into the cache
        samples = {name: [] for name in configs}
        for _ in range(args.rounds):
            for name, cfg in configs.items():
                samples[name].append(judge(task, solution, cfg))
        stats = {name: summarise(s) for name, s in samples.items()}
        report[solution_name] = {**stats, "overhead_s": {
            key: stats[measured][key]["median"] - stats[baseline][key]["median"]
            for key in ("wall_s", *(f"{stage}_s" for stage in STAGES))}}
        print(json.dumps({solution_name: report[solution_name]}, indent=1), file=sys.stderr)
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
