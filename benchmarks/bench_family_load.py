"""The family's CPU sandbox under the pipeline's load: POOLS sandbox pools at once (one process
each, as family_pipeline.py's --jobs chains run one pool each), every pool judging EVALS distinct
teacher solutions submitted together (an RL batch's tool calls), with the baselines cached
beforehand (as the stages' prewarm leaves them). Each solution is a teacher variant of a family
training task with a unique comment in its kernel, so that every judgement builds, as a policy's
attempts do. Reports the throughput (judgements a second, all pools together), each phase's
seconds (``Measurement.stage_seconds``: build, worker_start, reference, verify, timing and
lane_wait, the seconds a command or timed section waited for other evaluations), the latency from
submission to verdict, and how busy the host's cores were (/proc/stat).

Launch lines (from the repository root):
    # CPU dev machine, one pool as the toy pipeline runs it:
    python benchmarks/bench_family_load.py --pools 1 --evals 12 --out family_load.json
    # GPU host (the same CPU sandbox on its cores), three pools as family_runs.sh runs them:
    python3 benchmarks/bench_family_load.py --pools 3 --evals 24 --lane-slots 4 --out $OUT/family_load.json
    # ... a sandbox setting changed in every pool: --set timing.cpu_threads=1 --set lane_slots=8
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
# The family's training rows and the teacher's solutions of them, as the phases benchmark takes them.
from bench_family_phases import teacher_solutions, train_rows  # noqa: E402

# Phases reported (stage_seconds keys), in the order an evaluation meets them.
PHASES = ("build", "worker_start", "reference", "baselines", "verify", "timing", "spot_checks", "lane_wait")


def parse_sets(pairs: list[str]) -> dict[str, Any]:
    """``key=value`` (dotted keys nest: ``timing.cpu_threads=1``; values parsed as JSON when they
    parse, else kept as strings) as a nested dict for SandboxConfig.from_dict."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"error: --set takes key=value, got {pair!r}")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def sandbox_config(lane_slots: int, lane_cpus: int, sets: dict[str, Any]):
    from sandbox.config import SandboxConfig

    values = {"backend": "cpu", "lane_slots": lane_slots, "lane_cpus": lane_cpus}
    for key, value in sets.items():
        values[key] = dict(values.get(key, {}), **value) if isinstance(value, dict) else value
    return SandboxConfig.from_dict(values)


def write_workspaces(tasks: int, variants: list[str], evals: int, tag: str, work: Path) -> list[tuple[Path, Path, str]]:
    """``evals`` (task, workspace, "task/variant") triples cycling over the tasks' variants, each
    workspace with a comment of its own in its first kernel (a new build key: ``tag`` names the
    run and the pool, so no build of an earlier run is reused)."""
    choices = teacher_solutions(train_rows(tasks), variants, work)
    if not choices:
        raise SystemExit("error: no teacher solution for these tasks and variants")
    out = []
    for i in range(evals):
        spec, task, variant, solution = choices[i % len(choices)]
        workspace = solution.write(work / f"{i:03d}_{spec.id}_{variant}")
        kernel = sorted((workspace / "kernels").glob("*.cpp"))[0]
        kernel.write_text(f"// load benchmark {tag} judgement {i}\n" + kernel.read_text())
        out.append((task, workspace, f"{spec.id}/{variant}"))
    return out


def run_pool(args: argparse.Namespace, index: int) -> list[dict]:
    """One pool: every judgement submitted at once; a record per verdict."""
    from sandbox.pool import EvalRequest, SandboxPool

    cfg = sandbox_config(args.lane_slots, args.lane_cpus, parse_sets(args.set))
    with tempfile.TemporaryDirectory() as tmp:
        tag = f"{args.run_tag} pool {index}"
        triples = write_workspaces(args.tasks, args.variants.split(","), args.evals, tag, Path(tmp))
        records, lock = [], threading.Lock()
        with SandboxPool(cfg, workers=args.workers or None) as pool:
            start = time.monotonic()
            futures = []
            for i, (task, workspace, solution) in enumerate(triples):
                future = pool.submit(EvalRequest(f"p{index}-{i}", task, workspace))

                def done(f, i=i, solution=solution):
                    result = f.result()
                    m = result.measurement
                    with lock:
                        records.append({
                            "pool": index, "id": i, "solution": solution,
                            "latency_s": round(time.monotonic() - start, 3),
                            "runtime_us": m.runtime_us if m else None,
                            "correct": bool(m and m.correct), "task_error": result.task_error,
                            "error": (m.error or "")[:200] if m else None,
                            "stages": {k: round(v, 3) for k, v in (m.stage_seconds.items() if m else ())}})
                future.add_done_callback(done)
                futures.append(future)
            for future in futures:
                future.result()
    return records


def prewarm(args: argparse.Namespace) -> None:
    """The tasks' baselines timed once, before the load (cached: the stages' prewarm does this)."""
    from sandbox.judge import evaluate_baselines
    from src.agent.teacher import write_tasks

    cfg = sandbox_config(1, 0, parse_sets(args.set))
    with tempfile.TemporaryDirectory() as tmp:
        for _, task in write_tasks(train_rows(args.tasks), Path(tmp)):
            evaluate_baselines(task, cfg)


def cpu_busy() -> tuple[float, float]:
    """(busy, total) jiffies of every core so far (/proc/stat's first line)."""
    fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    return sum(fields) - idle, sum(fields)


def runtime_spread(records: list[dict]) -> dict:
    """Timing noise: each solution (task and variant) is judged several times with the same kernel
    code; the coefficient of variation of its runtimes, median and max over the solutions."""
    cvs = [statistics.pstdev(v) / statistics.mean(v) for v in runtimes(records).values() if len(v) > 1]
    if not cvs:
        return {"n": 0}
    return {"median_cv": round(statistics.median(cvs), 4), "max_cv": round(max(cvs), 4), "n": len(cvs)}


def summarize(records: list[dict], wall_s: float, busy_share: float) -> dict:
    def stats(values: list[float]) -> dict:
        if not values:
            return {"n": 0}
        return {"median": round(statistics.median(values), 3), "mean": round(statistics.mean(values), 3),
                "max": round(max(values), 3), "n": len(values)}

    return {
        "runtime_spread": runtime_spread(records),
        "judgements": len(records), "correct": sum(r["correct"] for r in records), "wall_s": round(wall_s, 2),
        "per_s": round(len(records) / max(wall_s, 1e-9), 4), "cpu_busy": round(busy_share, 3),
        "cores": os.cpu_count(), "latency_s": stats([r["latency_s"] for r in records]),
        "phases": {p: stats([r["stages"][p] for r in records if p in r["stages"]]) for p in PHASES},
    }


def runtimes(records: list[dict]) -> dict[str, list[float]]:
    """Each solution's runtimes (us) over its judgements."""
    by_solution: dict[str, list[float]] = {}
    for r in records:
        if r.get("runtime_us"):
            by_solution.setdefault(r["solution"], []).append(r["runtime_us"])
    return by_solution


def runtime_shift(without: list[dict], beside: list[dict]) -> Optional[float]:
    """How much slower the same solutions time with the harness beside: the median, over the
    solutions both runs timed, of the ratio of their median runtimes (None: none in common)."""
    a, b = runtimes(without), runtimes(beside)
    ratios = [statistics.median(b[k]) / statistics.median(a[k]) for k in a.keys() & b.keys()]
    return statistics.median(ratios) if ratios else None


def harness_beside_wins(without: dict, beside: dict, noise_margin: float = 0.25, noise_floor: float = 0.02,
                        max_shift: float = 1.05) -> bool:
    """Whether a run with the harness beside timed sections (``beside``: an --out file's content)
    is the better setting than one without (``without``): no lower throughput; the same
    solutions' runtimes not slower by more than ``max_shift`` (a bias against every solution, as
    the baselines come from the cache); and a runtime spread (median CV per solution) within
    ``noise_margin`` of the other's, or within ``noise_floor`` of it where both are small. Where
    the runs timed nothing to compare, throughput alone decides."""
    if beside["summary"]["per_s"] < without["summary"]["per_s"]:
        return False
    shift = runtime_shift(without["records"], beside["records"])
    if shift is not None and shift > max_shift:
        return False
    cv_without = without["summary"]["runtime_spread"].get("median_cv")
    cv_beside = beside["summary"]["runtime_spread"].get("median_cv")
    if cv_without is None or cv_beside is None:
        return True
    return cv_beside <= max(cv_without * (1 + noise_margin), cv_without + noise_floor)


def choose(paths: list[str]) -> int:
    """``--choose WITHOUT.json BESIDE.json``: print true or false for harness_beside_timing."""
    try:
        without, beside = (json.loads(Path(p).read_text()) for p in paths)
        wins = harness_beside_wins(without, beside)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        print(f"error: --choose needs two --out files of this benchmark ({type(exc).__name__}: {exc})", file=sys.stderr)
        return 2
    print("true" if wins else "false")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pools", type=int, default=1, help="sandbox pools at once, one process each")
    p.add_argument("--evals", type=int, default=12, help="judgements per pool, submitted together")
    p.add_argument("--tasks", type=int, default=4, help="the first N training tasks of the family set")
    p.add_argument("--variants", default="naive,vectorised", help="teacher variants (src/agent/teacher.py)")
    p.add_argument("--lane-slots", type=int, default=4, help="sandbox.lane_slots (family_runs.sh: 4)")
    p.add_argument("--lane-cpus", type=int, default=0, help="sandbox.lane_cpus (family_runs.sh: 0)")
    p.add_argument("--workers", type=int, default=0, help="evaluations in flight per pool (0: the pool's default)")
    p.add_argument("--set", action="append", default=[], help="another sandbox setting, key=value (repeatable)")
    p.add_argument("--out", default="", help="write the records and the summary here as JSON")
    p.add_argument("--pool-index", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--run-tag", default="", help=argparse.SUPPRESS)
    p.add_argument("--choose", nargs=2, metavar=("WITHOUT", "BESIDE"), default=None,
                   help="print the harness_beside_timing setting two earlier --out files favour, and stop")
    args = p.parse_args()
    if args.choose:
        return choose(args.choose)
    if args.pool_index >= 0:  # one pool's process: its records on stdout
        print(json.dumps(run_pool(args, args.pool_index)))
        return 0
    prewarm(args)
    argv = [*sys.argv[1:], "--run-tag", f"{os.getpid()}-{time.time_ns()}"]
    busy0, total0 = cpu_busy()
    start = time.monotonic()
    procs = [subprocess.Popen([sys.executable, __file__, *argv, "--pool-index", str(i)], stdout=subprocess.PIPE)
             for i in range(args.pools)]
    outputs = [proc.communicate()[0] for proc in procs]
    wall_s = time.monotonic() - start
    busy1, total1 = cpu_busy()
    failed = [i for i, proc in enumerate(procs) if proc.returncode != 0]
    if failed:
        print(f"error: pool process(es) {failed} failed", file=sys.stderr)
        return 2
    records = [r for out in outputs for r in json.loads(out)]
    summary = summarize(records, wall_s, (busy1 - busy0) / max(total1 - total0, 1e-9))
    print(f"{summary['judgements']} judgements ({summary['correct']} correct) in {summary['wall_s']} s: "
          f"{summary['per_s']} a second; cores busy {summary['cpu_busy']:.0%}; latency median "
          f"{summary['latency_s'].get('median')} s; runtime spread (CV per solution) {summary['runtime_spread']}")
    for phase, s in summary["phases"].items():
        if s["n"]:
            print(f"{phase:>12}: median {s['median']:.2f} s, mean {s['mean']:.2f}, max {s['max']:.2f} (n {s['n']})")
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), "summary": summary, "records": records}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
