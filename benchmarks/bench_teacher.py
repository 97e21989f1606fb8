"""How the scripted teacher's variants fare in the real sandbox on family tasks: verdict classes,
graduated rewards, speedups vs eager and torch.compile, and whether the grades really grade
(fused faster than naive, vectorised faster than fused, per task).

Each available variant (naive, fused, vectorised, wrong, broken) of each task is judged once
by a sandbox pool (src/agent/teacher.judge_variants: no agent loop). Tasks come from a family
parquet (python -m data_gen.family) or are sampled with the backend's shapes.

Launch lines (from the repository root):
  CPU:    python benchmarks/bench_teacher.py --backend cpu --tasks data/family/cpu/tasks.parquet \\
              --limit 24 --out teacher_cpu.jsonl
  1 GPU:  python benchmarks/bench_teacher.py --backend cuda --tasks data/family/cuda/tasks.parquet \\
              --limit 48 --out teacher_cuda.jsonl
  no parquet: --sample 24 draws specs with the backend's shapes (seed --seed)
Prints one table per variant and the pairwise comparison; --out keeps every record (JSONL).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from data_gen.dataset import load_tasks  # noqa: E402
from data_gen.family import family_specs, sample_specs  # noqa: E402
from sandbox.config import SandboxConfig  # noqa: E402
from sandbox.pool import SandboxPool  # noqa: E402
from src.agent.teacher import VARIANTS, judge_variants, verdict_class  # noqa: E402


def summary(records: list[dict]) -> list[str]:
    """A Markdown table: per variant, verdicts, rewards and median speedups."""
    lines = ["| variant | judged | correct | mismatch | compile_error | other | reward -1/1/2/3 | "
             "median speedup vs eager | vs compile |", "|---|---|---|---|---|---|---|---|---|"]
    for variant in VARIANTS:
        rows = [r for r in records if r["variant"] == variant]
        if not rows:
            continue
        classes = [verdict_class(r) for r in rows]
        rewards = [r.get("reward") for r in rows]
        speed = lambda key: [r[key] for r in rows if r.get(key)]  # noqa: E731
        med = lambda xs: f"{statistics.median(xs):.2f}x" if xs else "n/a"  # noqa: E731
        lines.append(f"| {variant} | {len(rows)} | {classes.count('correct')} | "
                     f"{classes.count('mismatch')} | {classes.count('compile_error')} | "
                     f"{sum(c not in ('correct', 'mismatch', 'compile_error') for c in classes)} | "
                     f"{'/'.join(str(rewards.count(v)) for v in (-1.0, 1.0, 2.0, 3.0))} | "
                     f"{med(speed('speedup_vs_eager'))} | {med(speed('speedup_vs_compile'))} |")
    return lines


def grading(records: list[dict]) -> list[str]:
    """Per task, how often the faster-meant variant really ran faster."""
    runtime = {(r["id"], r["variant"]): r.get("runtime_us") for r in records if verdict_class(r) == "correct"}
    lines = []
    for slow, fast in (("naive", "fused"), ("fused", "vectorised"), ("naive", "vectorised")):
        pairs = [(runtime[(i, slow)], runtime[(i, fast)]) for i, v in runtime if v == fast and (i, slow) in runtime
                 and runtime[(i, slow)] and runtime[(i, fast)]]
        if pairs:
            ratios = [a / b for a, b in pairs]
            lines.append(f"- {fast} faster than {slow}: {sum(x > 1 for x in ratios)}/{len(pairs)} tasks, "
                         f"median {slow}/{fast} runtime ratio {statistics.median(ratios):.2f}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--tasks", type=Path, default=None, help="family parquet; else --sample specs")
    parser.add_argument("--split", choices=("train", "heldout", "all"), default="all")
    parser.add_argument("--limit", type=int, default=24, help="first N tasks of the parquet")
    parser.add_argument("--sample", type=int, default=24, help="specs to sample when no --tasks")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=0, help="pool workers (0: the pool's default)")
    parser.add_argument("--no-compile-baseline", action="store_true", help="skip the torch.compile baseline")
    parser.add_argument("--out", type=Path, default=None, help="JSONL of every record")
    args = parser.parse_args()
    if args.tasks is not None:
        specs = family_specs(load_tasks(args.tasks), None if args.split == "all" else args.split)[:args.limit]
    else:
        specs = sample_specs(args.sample, args.backend, args.seed)
    cfg = SandboxConfig(backend=args.backend, compile_baseline=not args.no_compile_baseline,
                        pool_workers=args.workers)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-teacher-") as tmp, SandboxPool(cfg) as pool:
        records = asyncio.run(judge_variants(specs, args.backend, pool, tmp))
    if args.out:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in records))
    print(f"{len(specs)} tasks, {len(records)} evaluations, {time.monotonic() - start:.0f} s, backend {args.backend}")
    print("\n".join(summary(records) + [""] + grading(records)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
