"""What one family evaluation costs, by phase: the teacher's solutions of a few family training
tasks, each judged REPEATS times in a row by ``sandbox.judge.evaluate`` (one at a time, nothing
beside it), with ``Measurement.stage_seconds`` per phase (build, reference worker, torch.compile
and eager baselines, verification, timed section, spot checks). The first judgement of a task
times its baselines unless they are cached; later ones reuse them and the build cache.

Launch lines (from the repository root):
    # CPU (the family's sandbox):
    python benchmarks/bench_family_phases.py --tasks 3 --out family_phases.json
    # one GPU host: the same CPU sandbox, on that host's cores (the family set is CPU-sized)
    python3 benchmarks/bench_family_phases.py --tasks 3 --out $OUT/family_phases.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TASKS = ROOT / "data" / "family" / "cpu" / "tasks.parquet"


def family_rows(split: str, n: int = 0) -> list[dict]:
    """The first ``n`` rows (0: all) of the family set's ``split`` ("all": every row)."""
    import pyarrow.parquet as pq

    rows = [r for r in pq.read_table(TASKS).to_pylist() if split == "all" or r.get("split") == split]
    return rows[:n] if n else rows


def train_rows(n: int) -> list[dict]:
    """The first ``n`` training rows of the family set."""
    return family_rows("train")[:n]


def teacher_solutions(rows: list[dict], variants: list[str], work: Path) -> list[tuple]:
    """(spec, task path, variant, Solution) for each row's task, written under ``work/tasks``, and
    each teacher variant it has (one it lacks, e.g. no vectorised variant for its width, is
    skipped and said on stderr)."""
    from src.agent.teacher import write_solution, write_tasks

    out = []
    for spec, task in write_tasks(rows, work / "tasks"):
        for variant in variants:
            try:
                out.append((spec, task, variant, write_solution(spec, variant, "cpu")))
            except ValueError as exc:
                print(f"{spec.id} {variant}: skipped ({exc})", file=sys.stderr)
    return out


def judge_all(tasks: int, variants: list[str], repeats: int, work: Path) -> list[dict]:
    from sandbox.config import SandboxConfig
    from sandbox.judge import evaluate

    cfg, records = SandboxConfig(backend="cpu"), []
    for spec, task, variant, solution in teacher_solutions(train_rows(tasks), variants, work):
        workspace = solution.write(work / f"{spec.id}_{variant}")
        for repeat in range(repeats):
            start = time.monotonic()
            m = evaluate(task, workspace, cfg)
            record = {"task": spec.id, "variant": variant, "repeat": repeat, "correct": m.correct,
                      "wall_s": round(time.monotonic() - start, 3),
                      "stages": {k: round(v, 3) for k, v in m.stage_seconds.items()}}
            print(json.dumps(record), file=sys.stderr)
            records.append(record)
    return records


def summary(records: list[dict]) -> dict:
    """Median and range of each phase over the judgements after a task's first (cached baselines)."""
    later = [r for r in records if r["repeat"] > 0 or "compile" not in r["stages"]]
    phases = sorted({k for r in later for k in r["stages"]} | {"wall_s"})
    out = {}
    for phase in phases:
        values = [r["wall_s"] if phase == "wall_s" else r["stages"].get(phase, 0.0) for r in later]
        out[phase] = {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=3, help="the first N training tasks of the family set")
    p.add_argument("--variants", default="naive,vectorised", help="teacher variants (src/agent/teacher.py)")
    p.add_argument("--repeats", type=int, default=2, help="judgements of each solution in a row")
    p.add_argument("--out", default="", help="write the records and the summary here as JSON")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as work:
        records = judge_all(args.tasks, args.variants.split(","), args.repeats, Path(work))
    if not records:
        print("error: nothing was judged", file=sys.stderr)
        return 2
    result = {"records": records, "cached_baselines": summary(records)}
    for phase, s in result["cached_baselines"].items():
        print(f"{phase:>12}: median {s['median']:.2f} s (min {s['min']:.2f}, max {s['max']:.2f}, n {s['n']})")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
