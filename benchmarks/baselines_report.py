"""What a ``python -m sandbox baselines`` run over a KernelBench tree measured, as Markdown: how many
problems were timed, task and torch.compile errors, the problems still missing, our eager times
over KernelBench's published H100 eager times (the timing method's sanity check, per level and
source), torch.compile over eager, the outliers, and the GPU's utilisation from an
``nvidia-smi dmon -s um`` log written beside the run.

    python benchmarks/baselines_report.py docs/data/kernelbench_baselines_h200_2026-12-03.jsonl \\
        --benchmark-root .kb [--dmon dmon.txt ...] [--json out.json]

Nothing here needs a GPU; the published times come from ``<root>/timing`` (scripts/fetch_kernelbench.py).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Iterable, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_kernelbench import load_published_baselines  # noqa: E402
from fetch_kernelbench import problem_files  # noqa: E402

# Ratios outside [1 / OUTLIER, OUTLIER] x the geometric mean are listed by name.
OUTLIER = 2.0


def read_records(paths: Iterable[Path]) -> dict[str, dict]:
    """problem file id ("level1/19_ReLU.py") -> its record; a later file's line wins (resumed runs)."""
    records: dict[str, dict] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                records[record["id"]] = record
    return records


def short_id(problem: str) -> str:
    """"level1/19_ReLU.py" -> "level1/19" (the published tables' key)."""
    level, _, name = problem.partition("/")
    return f"{level}/{name.split('_', 1)[0]}"


def ratio_summary(ratios: dict[str, float]) -> Optional[dict]:
    """Geometric mean, median, range and the outliers of per-problem ratios."""
    if not ratios:
        return None
    geomean = statistics.geometric_mean(ratios.values())
    outliers = {k: v for k, v in ratios.items() if v > geomean * OUTLIER or v < geomean / OUTLIER}
    return {"n": len(ratios), "geomean": geomean, "median": statistics.median(ratios.values()),
            "min": min(ratios.values()), "max": max(ratios.values()), "outliers": dict(sorted(outliers.items()))}


def eager_over_published(records: dict[str, dict], published: dict[str, dict]) -> dict[str, dict]:
    """Per source and level ("h100_pcie/level2"), and per source over all levels: our eager median
    (us) over the published mean (ms)."""
    out: dict[str, dict] = {}
    for source, table in published.items():
        by_level: dict[str, dict[str, float]] = {}
        for problem, record in records.items():
            key = short_id(problem)
            if record.get("eager_us") and table.get(key):
                by_level.setdefault(key.split("/")[0], {})[key] = record["eager_us"] / 1000.0 / table[key]
        for level, ratios in sorted(by_level.items()):
            out[f"{source}/{level}"] = ratio_summary(ratios)
        everything = {k: v for ratios in by_level.values() for k, v in ratios.items()}
        if len(by_level) > 1:
            out[f"{source}/all"] = ratio_summary(everything)
    return out


def compile_over_eager(records: dict[str, dict]) -> Optional[dict]:
    """torch.compile's time over eager's, per problem where both were timed."""
    ratios = {short_id(p): r["compile_us"] / r["eager_us"] for p, r in records.items()
              if r.get("compile_us") and r.get("eager_us")}
    summary = ratio_summary(ratios)
    if summary:
        summary["compile_faster"] = sum(v < 1.0 for v in ratios.values())
    return summary


def dmon_utilisation(paths: Iterable[Path]) -> Optional[dict]:
    """Mean SM utilisation (%) over the samples of ``nvidia-smi dmon -s um`` logs."""
    samples: list[float] = []
    for path in paths:
        column = None
        for line in path.read_text().splitlines():
            fields = line.lstrip("#").split()
            if line.startswith("#") and "sm" in fields and column is None:
                column = fields.index("sm")
            elif column is not None and not line.startswith("#") and len(fields) > column:
                value = fields[column]
                if value.replace(".", "", 1).isdigit():
                    samples.append(float(value))
    if not samples:
        return None
    return {"samples": len(samples), "sm_mean_pct": statistics.fmean(samples),
            "nonzero": sum(s > 0 for s in samples)}


def report(records: dict[str, dict], benchmark_root: Path, dmon: list[Path]) -> dict:
    problems = problem_files(benchmark_root)
    stage_seconds = [r["compile_s"] for r in records.values() if r.get("compile_s")]
    return {
        "problems": len(problems), "timed": len(records),
        "missing": sorted(set(problems) - set(records)),
        "task_errors": {p: r["task_error"] for p, r in records.items() if r.get("task_error")},
        "compile_errors": {p: r["compile_error"] for p, r in records.items() if r.get("compile_error")},
        "compile_s_median": statistics.median(stage_seconds) if stage_seconds else None,
        "compile_s_max": max(stage_seconds) if stage_seconds else None,
        "eager_over_published": eager_over_published(records, load_published_baselines(benchmark_root)),
        "compile_over_eager": compile_over_eager(records),
        "gpu": dmon_utilisation(dmon),
    }


def markdown(data: dict) -> str:
    lines = [f"Timed {data['timed']} of {data['problems']} problems; task errors: {len(data['task_errors'])}; "
             f"torch.compile errors: {len(data['compile_errors'])}; missing: {', '.join(data['missing']) or 'none'}."]
    for problem, error in {**data["task_errors"], **data["compile_errors"]}.items():
        lines.append(f"- {problem}: {str(error)[:200]}")
    if data["compile_s_median"] is not None:
        lines.append(f"torch.compile's compile work: median {data['compile_s_median']:.1f} s, "
                     f"max {data['compile_s_max']:.1f} s.")
    lines += ["", "| ratio | n | geomean | median | min - max | outliers (> 2x off the geomean) |", "|---|---|---|---|---|---|"]
    rows = [(f"our eager / published eager, {name}", s) for name, s in data["eager_over_published"].items()]
    rows.append(("torch.compile / eager (ours)", data["compile_over_eager"]))
    for name, s in rows:
        if s:
            outliers = ", ".join(f"{k} {v:.2f}" for k, v in s["outliers"].items()) or "-"
            lines.append(f"| {name} | {s['n']} | {s['geomean']:.3f} | {s['median']:.3f} | "
                         f"{s['min']:.2f} - {s['max']:.2f} | {outliers} |")
    if data["compile_over_eager"]:
        lines.append(f"\ntorch.compile faster than eager on {data['compile_over_eager']['compile_faster']} of "
                     f"{data['compile_over_eager']['n']} problems.")
    if data["gpu"]:
        lines.append(f"GPU SM utilisation (nvidia-smi dmon): mean {data['gpu']['sm_mean_pct']:.1f} % over "
                     f"{data['gpu']['samples']} samples, {data['gpu']['nonzero']} non-zero.")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", nargs="+", type=Path, help="baselines JSONL files (later lines win)")
    parser.add_argument("--benchmark-root", type=Path, default=ROOT / ".kb", help="the KernelBench tree")
    parser.add_argument("--dmon", nargs="*", type=Path, default=[], help="nvidia-smi dmon logs of the run")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)
    missing = [str(p) for p in [*args.records, args.benchmark_root, *args.dmon] if not p.exists()]
    if missing:
        print(f"error: not found: {', '.join(missing)}", file=sys.stderr)
        return 2
    data = report(read_records(args.records), args.benchmark_root, args.dmon)
    if args.json:
        args.json.write_text(json.dumps(data, indent=1) + "\n")
    print(markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
