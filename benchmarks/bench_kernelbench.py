"""KernelBench at its real sizes: our own CUDA solutions judged by the sandbox pool and by a
sequential loop that does what KernelBench's ``eval_kernel_against_ref`` does, in one command.

(a) The pool: every (problem, solution) pair through ``sandbox.pool.SandboxPool`` (task in its own
    process, builds on CPU slots, one lane per GPU with ``--lane-slots`` evaluations at once and
    every timed section exclusive), with a fresh cache directory (cold builds, no cached baselines).
(b) The sequential loop: one child process that, for each pair in turn, does what KernelBench's
    ``eval_kernel_against_ref`` does (``kernelbench_eval.py``: our code, matched to its current
    eval.py and timing.py): task and solution in one namespace, ``load_inline`` into a fresh build
    folder, 5 correctness trials at fp32 ``atol = rtol = 1e-4``, 100 CUDA-event timed runs of the
    solution and of the reference.

Reported: solutions judged per hour for each and their ratio, verdict agreement per problem
(every disagreement named with both verdicts), GPU busy share (nvidia-smi sampled every 200 ms;
the pool's lane shares too: busy = some evaluation held a slot, slot occupancy = slot time over
slots x wall, timing = the exclusive timed sections), per-stage medians, our eager times against KernelBench's
published H100 baselines (``.kb/timing``). JSON to ``--out``, Markdown on stdout.

Each phase has a wall-clock budget: pairs not judged within it are cancelled (pool) or not
started (loop), and rates count judged pairs over the time to the last verdict. The loop takes
the pairs in level-interleaved order so a partial run samples all three levels.

  H200:  python benchmarks/bench_kernelbench.py --benchmark-root .kb \\
             --solutions examples/kernelbench_solutions --out kb_bench.json
  lane slots (verification of one evaluation beside another's, timing still exclusive):
         ... --skip-sequential --pool-budget-s 300 --lane-slots 2 --out kb_pool_slots2.json
  or one phase per command, then one report:
         ... --skip-sequential --pool-budget-s 540 --out pool.json
         ... --skip-pool --sequential-budget-s 540 --out seq.json
         ... --combine pool.json seq.json --out kb_bench.json
  CPU smoke (tiny tasks, pure-python solutions): --backend cpu (the loop then times with
  perf_counter; nothing here needs a GPU to import or to print --help).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures import as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import kernelbench_eval as kb  # noqa: E402
from bench_pool import GpuSampler  # noqa: E402
from sandbox import SandboxConfig  # noqa: E402
from sandbox.placement import available_cpus  # noqa: E402
from sandbox.pool import EvalRequest, SandboxPool, visible_devices  # noqa: E402
from src.evaluation.kernelbench import load_problems  # noqa: E402
from src.evaluation.replay import solutions_from_dir  # noqa: E402

BASELINE_FILES = {"h100_modal": "timing/H100_modal/baseline_time_torch.json",
                  "h100_pcie": "timing/H100_PCIe_LambdaLabs/baseline_time_torch.json"}
NOT_JUDGED = "not judged"
# Wall-clock time at which the parent launched the loop's process.
T0_ENV = "BENCH_KB_T0"


@dataclass(frozen=True)
class Pair:
    level: int
    problem_id: int
    task: str
    solution: str

    @property
    def id(self) -> str:
        return f"level{self.level}/{self.problem_id}"

    @property
    def task_file(self) -> str:
        return Path(self.task).name


# ---------------------------------------------------------------- which pairs

def parse_selection(text: str) -> Optional[dict[int, Optional[set[int]]]]:
    """"1/19,1/23,3" -> {1: {19, 23}, 3: None} (None: the whole level); "" -> None (everything)."""
    if not text.strip():
        return None
    chosen: dict[int, Optional[set[int]]] = {}
    for item in text.split(","):
        level, _, pid = item.strip().partition("/")
        if not level.isdigit() or (pid and not pid.isdigit()):
            raise SystemExit(f"error: --problems item {item!r} is not LEVEL or LEVEL/ID")
        if not pid:
            chosen[int(level)] = None
        elif chosen.get(int(level), set()) is not None:
            chosen.setdefault(int(level), set()).add(int(pid))
    return chosen


def find_pairs(benchmark_root: Path, solutions: Path, selection: Optional[dict] = None) -> list[Pair]:
    """Every solution under ``solutions`` (level{L}/{id}_*.py) with its problem file; a solution
    whose problem is not in the benchmark root is an error, not a silent skip."""
    found = solutions_from_dir(solutions)
    levels = sorted({level for level, _ in found})
    problems = {p.key: p for p in load_problems(benchmark_root, levels)}
    missing = sorted(key for key in found if key not in problems)
    if missing:
        raise SystemExit(f"error: solutions for problems absent from {benchmark_root}: {missing}")
    pairs = [Pair(level, pid, str(problems[level, pid].path), str(path))
             for (level, pid), path in sorted(found.items())]
    if selection is not None:
        pairs = [p for p in pairs if p.level in selection
                 and (selection[p.level] is None or p.problem_id in selection[p.level])]
    if not pairs:
        raise SystemExit("error: no (problem, solution) pair selected")
    return pairs


def interleave(pairs: list[Pair]) -> list[Pair]:
    """Round-robin over levels (1, 2, 3, 1, 2, ...), each level in id order."""
    by_level = [[p for p in pairs if p.level == level] for level in sorted({p.level for p in pairs})]
    out = []
    for index in range(max(len(group) for group in by_level)):
        out += [group[index] for group in by_level if index < len(group)]
    return out


# ---------------------------------------------------------------- (b) the sequential loop

def sequential_worker(pairs_file: Path, out_file: Path, budget_s: float, backend: str) -> None:
    """The loop's process: pairs one after another in this one process, a JSON line each."""
    import torch

    device = torch.device("cuda:0" if backend == "cuda" else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    pairs = [Pair(**p) for p in json.loads(pairs_file.read_text())]
    # Times count from the parent's launch of this process (its start-up is the loop's cost too).
    start, longest = float(os.environ.get(T0_ENV, time.time())), 0.0
    builds = out_file.parent / "sequential_extensions"  # fresh: the caller's new work folder
    with out_file.open("a") as sink:
        for index, pair in enumerate(pairs):
            if index and time.time() - start + longest > budget_s:
                break  # the next one would likely not finish inside the budget
            began = time.time() - start
            row = _one_sequential(pair, builds / f"ext{index}", device)
            row.update(id=pair.id, started_s=began, finished_s=time.time() - start)
            longest = max(longest, row["finished_s"] - began)
            sink.write(json.dumps(row) + "\n")
            sink.flush()
            print(f"[sequential] {pair.id}: {row['verdict']} in {row['finished_s'] - began:.1f} s", file=sys.stderr)


def _one_sequential(pair: Pair, build_dir: Path, device) -> dict:
    build_dir.mkdir(parents=True, exist_ok=True)
    try:
        return kb.evaluate(Path(pair.task).read_text(), Path(pair.solution).read_text(), str(build_dir), device,
                           task_name=pair.task, solution_name=pair.solution)
    except Exception as exc:  # a fault of this harness: recorded, the loop goes on
        return {"verdict": "harness_error", "detail": kb.short_error(exc) + "\n" + traceback.format_exc()[-1500:],
                "stages": {}}
    finally:
        kb.cleanup(device)


def run_sequential(pairs: list[Pair], work: Path, budget_s: float, backend: str) -> dict:
    """Start the loop's process, sample the GPU while it runs, stop it at the budget."""
    pairs_file, out_file = work / "sequential_pairs.json", work / "sequential_results.jsonl"
    pairs_file.write_text(json.dumps([asdict(p) for p in pairs]))
    out_file.write_text("")
    command = [sys.executable, str(Path(__file__).resolve()), "--sequential-worker", str(pairs_file),
               str(out_file), "--sequential-budget-s", str(budget_s), "--backend", backend]
    sampler = GpuSampler(visible_devices(backend)[:1])
    start = time.monotonic()
    child = subprocess.Popen(command, start_new_session=True,
                             env=dict(os.environ, PYTHONUNBUFFERED="1", **{T0_ENV: repr(time.time())}))
    stopped = _wait_or_kill(child, budget_s)
    wall = time.monotonic() - start
    utilisation = sampler.stop()
    rows = [json.loads(line) for line in out_file.read_text().splitlines() if line.strip()]
    return {"wall_s": wall, "stopped_at_budget": stopped, "exit_code": child.returncode,
            "gpu_utilisation_mean_pct": utilisation, "rows": {row["id"]: row for row in rows},
            "submitted": [p.id for p in pairs]}


def _wait_or_kill(child: subprocess.Popen, budget_s: float) -> bool:
    try:
        child.wait(timeout=budget_s)
        return False
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)  # the loop's own session: it and its compilers
        child.wait()
        return True


# ---------------------------------------------------------------- (a) the pool

def run_pool(pairs: list[Pair], cfg: SandboxConfig, budget_s: float, workers: int = 0) -> dict:
    """Every pair through one SandboxPool; what is not done at the budget is cancelled."""
    pool = SandboxPool(cfg, workers=workers or None)
    devices = list(pool.lanes.devices)
    sampler = GpuSampler(devices)
    start = time.monotonic()
    futures = {pool.submit(EvalRequest(p.id, Path(p.task), Path(p.solution))): p.id for p in pairs}
    rows: dict[str, dict] = {}
    try:
        for future in as_completed(futures, timeout=budget_s):
            result = future.result()
            rows[result.id] = _pool_row(result, time.monotonic() - start)
            print(f"[pool] {result.id}: {rows[result.id]['verdict']} at {rows[result.id]['finished_s']:.1f} s",
                  file=sys.stderr)
    except FutureTimeout:
        pass
    stopped = len(rows) < len(pairs)
    pool.close(cancel_pending=stopped)
    wall = time.monotonic() - start
    utilisation = sampler.stop()
    lanes, lane_wall = pool.lanes, wall * max(len(devices), 1)
    return {"wall_s": wall, "stopped_at_budget": stopped, "devices": list(devices),
            "gpu_utilisation_mean_pct": utilisation, "lane_slots": lanes.lane_slots,
            # Time some evaluation held a slot; slot time over every slot's wall; exclusive timing.
            "lane_busy_fraction": sum(lanes.busy_s.values()) / lane_wall,
            "lane_slot_occupancy": sum(lanes.slot_s.values()) / (lane_wall * lanes.lane_slots),
            "lane_timing_fraction": sum(lanes.timing_s.values()) / lane_wall,
            "timed_sections": sum(lanes.timed.values()),
            "build_slots": cfg.build_workers or max(1, len(available_cpus()) // 2),
            "build_cores_pinned": len(getattr(pool.lanes.cpus, "builds", ())),
            "rows": rows, "submitted": [p.id for p in pairs]}


def _pool_row(result, finished_s: float) -> dict:
    row: dict[str, Any] = {"finished_s": finished_s}
    if result.cancelled:
        return dict(row, verdict=NOT_JUDGED, detail="cancelled at the budget")
    if result.task_error is not None:
        return dict(row, verdict="task_error", detail=result.task_error[:600])
    m = result.measurement
    row.update(verdict="correct" if m.correct else (m.error or "incorrect"), detail=(m.error_detail or "")[:600],
               runtime_us=m.runtime_us, eager_us=m.eager_us, compile_us=m.compile_us,
               max_abs_diff=m.max_abs_diff, stages=dict(m.stage_seconds), handovers=dict(m.handovers))
    return row


# ---------------------------------------------------------------- the report

JUDGED_EXCLUDES = {NOT_JUDGED, "task_error", "sandbox_error", "harness_error"}


def phase_summary(phase: Optional[dict]) -> Optional[dict]:
    """Judged count, rate per hour over the time to the last verdict, stage medians, verdicts."""
    if phase is None:
        return None
    rows = phase["rows"]
    judged = [r for r in rows.values() if r["verdict"] not in JUDGED_EXCLUDES]
    span = max((r["finished_s"] for r in judged), default=0.0)
    stage_names = sorted({name for r in judged for name in r.get("stages", {})})
    return {
        "submitted": len(phase["submitted"]), "judged": len(judged),
        "correct": sum(r["verdict"] == "correct" for r in judged),
        "span_s": span, "wall_s": phase["wall_s"],
        "judged_per_hour": len(judged) / span * 3600 if span > 0 else 0.0,
        "gpu_utilisation_mean_pct": phase.get("gpu_utilisation_mean_pct"),
        "lane_slots": phase.get("lane_slots"),
        "lane_busy_fraction": phase.get("lane_busy_fraction"),
        "lane_slot_occupancy": phase.get("lane_slot_occupancy"),
        "lane_timing_fraction": phase.get("lane_timing_fraction"),
        "stage_s_median": {name: statistics.median(r["stages"].get(name, 0.0) for r in judged)
                           for name in stage_names},
        "verdicts": _count(rows[pid]["verdict"] if pid in rows else NOT_JUDGED for pid in phase["submitted"]),
    }


def _count(values) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return dict(sorted(counts.items()))


def agreement(pool: Optional[dict], sequential: Optional[dict]) -> Optional[dict]:
    """Per pair judged by both: do the verdicts agree on correct / not correct? Each
    disagreement is listed with both verdicts and their details."""
    if pool is None or sequential is None:
        return None
    both = [pid for pid in pool["rows"] if pid in sequential["rows"]
            and pool["rows"][pid]["verdict"] not in JUDGED_EXCLUDES
            and sequential["rows"][pid]["verdict"] not in JUDGED_EXCLUDES]
    disagreements = []
    for pid in sorted(both, key=_pair_order):
        a, b = pool["rows"][pid], sequential["rows"][pid]
        if (a["verdict"] == "correct") != (b["verdict"] == "correct"):
            disagreements.append({"id": pid, "pool": a["verdict"], "pool_detail": a.get("detail", ""),
                                  "sequential": b["verdict"], "sequential_detail": b.get("detail", "")})
    return {"judged_by_both": len(both), "agree": len(both) - len(disagreements), "disagreements": disagreements}


def _pair_order(pid: str) -> tuple[int, int]:
    level, _, number = pid.partition("/")
    return int(level[len("level"):]), int(number)


def load_published_baselines(benchmark_root: Path) -> dict[str, dict]:
    """KernelBench's published eager times (ms), per source: {source: {"level1/19": ms}}."""
    out = {}
    for source, rel in BASELINE_FILES.items():
        path = benchmark_root / rel
        if path.is_file():
            data = json.loads(path.read_text())
            # H100_modal's file holds a few rows timed on an H200; only H100 rows are kept.
            out[source] = {f"{level}/{name.split('_', 1)[0]}": row["mean"]
                           for level, table in data.items() for name, row in table.items()
                           if "H100" in row.get("hardware", "H100")}
    return out


def eager_ratios(pool: Optional[dict], sequential: Optional[dict], published: dict[str, dict]) -> dict:
    """Our eager times over KernelBench's published ones, per source: the pool's eager median and
    the loop's reference mean (KernelBench's own method); geometric means and per pair."""
    ours = {}
    if pool is not None:
        ours["pool_eager"] = {pid: r["eager_us"] / 1000.0 for pid, r in pool["rows"].items() if r.get("eager_us")}
    if sequential is not None:
        ours["sequential_reference"] = {pid: r["ref_runtime"]["mean"] for pid, r in sequential["rows"].items()
                                        if r.get("ref_runtime")}
    out = {}
    for name, times in ours.items():
        for source, table in published.items():
            ratios = {pid: ms / table[pid] for pid, ms in times.items() if table.get(pid)}
            if ratios:
                out[f"{name}/{source}"] = {"geomean": statistics.geometric_mean(ratios.values()),
                                           "n": len(ratios), "per_pair": ratios}
    return out


def assemble_report(pool: Optional[dict], sequential: Optional[dict], published: dict[str, dict],
                    settings: dict) -> dict:
    summary = {"pool": phase_summary(pool), "sequential": phase_summary(sequential)}
    rates = [summary[k]["judged_per_hour"] if summary[k] else 0.0 for k in ("pool", "sequential")]
    return {"settings": settings, "summary": summary,
            "ratio_pool_over_sequential": rates[0] / rates[1] if rates[1] > 0 else None,
            "agreement": agreement(pool, sequential), "eager_vs_published": eager_ratios(pool, sequential, published),
            "pool": pool, "sequential": sequential}


def markdown(report: dict) -> str:
    """The summary table, the disagreements and one row per pair."""
    return "\n".join(_summary_table(report) + [""] + _disagreement_lines(report) + [""] + _pair_table(report))


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}" if math.isfinite(value) else str(value)
    return str(value)


def _summary_table(report: dict) -> list[str]:
    pool, seq = report["summary"]["pool"] or {}, report["summary"]["sequential"] or {}
    lines = ["| | pool | sequential (KernelBench-style) |", "|---|---|---|"]
    for label, key, digits in (("pairs submitted", "submitted", 0), ("judged", "judged", 0),
                               ("correct", "correct", 0), ("time to last verdict, s", "span_s", 1),
                               ("wall, s", "wall_s", 1), ("judged per hour", "judged_per_hour", 1),
                               ("GPU utilisation, mean %", "gpu_utilisation_mean_pct", 1),
                               ("lane slots per device", "lane_slots", 0),
                               ("lane busy fraction", "lane_busy_fraction", 2),
                               ("lane slot occupancy", "lane_slot_occupancy", 2),
                               ("exclusive timing fraction", "lane_timing_fraction", 2)):
        lines.append(f"| {label} | {_fmt(pool.get(key), digits)} | {_fmt(seq.get(key), digits)} |")
    for name in sorted(set(pool.get("stage_s_median", {})) | set(seq.get("stage_s_median", {}))):
        lines.append(f"| median {name}, s | {_fmt(pool.get('stage_s_median', {}).get(name), 2)} | "
                     f"{_fmt(seq.get('stage_s_median', {}).get(name), 2)} |")
    lines.append(f"\nPool / sequential, judged per hour: {_fmt(report['ratio_pool_over_sequential'], 2)}x")
    for name, ratio in report["eager_vs_published"].items():
        lines.append(f"Eager time / published ({name}): geomean {ratio['geomean']:.3f} over {ratio['n']} problems")
    return lines


def _disagreement_lines(report: dict) -> list[str]:
    agree = report["agreement"]
    if agree is None:
        return ["Verdict agreement: needs both phases."]
    lines = [f"Verdict agreement: {agree['agree']} of {agree['judged_by_both']} judged by both."]
    for d in agree["disagreements"]:
        lines.append(f"- {d['id']}: pool {d['pool']} ({d['pool_detail'][:160]!r}); "
                     f"sequential {d['sequential']} ({d['sequential_detail'][:160]!r})")
    return lines


def _pair_table(report: dict) -> list[str]:
    pool_rows = (report["pool"] or {}).get("rows", {})
    seq_rows = (report["sequential"] or {}).get("rows", {})
    ids = sorted(set((report["pool"] or {}).get("submitted", [])) | set((report["sequential"] or {}).get("submitted", [])),
                 key=_pair_order)
    lines = ["| problem | pool verdict | pool runtime, us | pool eager, us | loop verdict | loop runtime (mean), us "
             "| loop reference (mean), us |", "|---|---|---|---|---|---|---|"]
    for pid in ids:
        a, b = pool_rows.get(pid, {}), seq_rows.get(pid, {})
        loop_rt = b["runtime"]["mean"] * 1000 if b.get("runtime") else None
        loop_ref = b["ref_runtime"]["mean"] * 1000 if b.get("ref_runtime") else None
        lines.append(f"| {pid} | {a.get('verdict', NOT_JUDGED)} | {_fmt(a.get('runtime_us'))} | "
                     f"{_fmt(a.get('eager_us'))} | {b.get('verdict', NOT_JUDGED)} | {_fmt(loop_rt)} | {_fmt(loop_ref)} |")
    return lines


# ---------------------------------------------------------------- main

def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--benchmark-root", type=Path, default=ROOT / ".kb",
                        help="KernelBench tree (level1/ ... and timing/; see scripts/fetch_kernelbench.py)")
    parser.add_argument("--solutions", type=Path, default=ROOT / "examples" / "kernelbench_solutions")
    parser.add_argument("--problems", default="", help="subset, e.g. 1/19,1/23,3 (a bare level: all of it)")
    parser.add_argument("--backend", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--skip-pool", action="store_true")
    parser.add_argument("--skip-sequential", action="store_true")
    parser.add_argument("--workers", type=int, default=0, help="pool evaluations in flight (0: the pool's default)")
    parser.add_argument("--build-workers", type=int, default=0, help="pool build slots (0: half the cores)")
    parser.add_argument("--lane-slots", type=int, default=SandboxConfig.lane_slots,
                        help="pool evaluations per device at once (timing stays exclusive)")
    parser.add_argument("--compile-baseline", action="store_true",
                        help="let the pool time torch.compile too (KernelBench's loop does not: off for equal work)")
    parser.add_argument("--pool-budget-s", type=float, default=300.0)
    parser.add_argument("--sequential-budget-s", type=float, default=150.0)
    parser.add_argument("--sequential-limit", type=int, default=0,
                        help="at most this many pairs through the loop (0: as many as the budget allows)")
    parser.add_argument("--out", default="", help="JSON report path")
    parser.add_argument("--combine", nargs="+", type=Path, default=[], metavar="REPORT",
                        help="judge nothing: one report from earlier --out files (the pool phase of "
                             "the first that has one, the sequential phase likewise)")
    parser.add_argument("--sequential-worker", nargs=2, metavar=("PAIRS", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.lane_slots < 1:
        parser.error(f"--lane-slots must be >= 1, got {args.lane_slots}")
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    if args.sequential_worker:
        sequential_worker(Path(args.sequential_worker[0]), Path(args.sequential_worker[1]),
                          args.sequential_budget_s, args.backend)
        return 0
    if args.combine:
        return finish(combine_reports(args.combine, args.benchmark_root), args.out)
    pairs = interleave(find_pairs(args.benchmark_root, args.solutions, parse_selection(args.problems)))
    work = Path(tempfile.mkdtemp(prefix="bench-kb-"))
    settings = {key: str(value) if isinstance(value, Path) else value for key, value in vars(args).items()
                if key != "sequential_worker"}
    settings.update(pairs=len(pairs), kb_correct_trials=kb.CORRECT_TRIALS, kb_perf_trials=kb.PERF_TRIALS)
    try:
        pool = None if args.skip_pool else run_pool(pairs, SandboxConfig(
            backend=args.backend, cache_dir=str(work / "cache"), compile_baseline=args.compile_baseline,
            build_workers=args.build_workers, lane_slots=args.lane_slots), args.pool_budget_s, args.workers)
        seq_pairs = pairs[:args.sequential_limit] if args.sequential_limit else pairs
        sequential = None if args.skip_sequential else run_sequential(seq_pairs, work, args.sequential_budget_s,
                                                                       args.backend)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return finish(assemble_report(pool, sequential, load_published_baselines(args.benchmark_root), settings), args.out)


def combine_reports(paths: list[Path], benchmark_root: Path) -> dict:
    """The pool phase of one earlier run with the sequential phase of another (each run can then
    have a command of its own)."""
    reports = [json.loads(path.read_text()) for path in paths]
    pool = next((r["pool"] for r in reports if r.get("pool")), None)
    sequential = next((r["sequential"] for r in reports if r.get("sequential")), None)
    settings = {"combined": [str(p) for p in paths], "runs": [r.get("settings") for r in reports]}
    return assemble_report(pool, sequential, load_published_baselines(benchmark_root), settings)


def finish(report: dict, out: str) -> int:
    if out:
        Path(out).write_text(json.dumps(report, indent=1))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
