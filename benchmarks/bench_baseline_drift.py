"""Do cached baselines hold on the host that reads them? Times the eager and torch.compile
baselines of family tasks afresh, ROUNDS times (each round into a cache root of its own, so
nothing is read from a cache), and compares every round's medians with those of a cache carried
from earlier calls (``--carried``: a cache root, e.g. the family carry's ``baselines`` folder
unpacked into it), and the rounds with each other.

Why: the baseline cache is keyed by the device's model name, not by the machine. A lent call may
land on another host of the same model, and the CPU sandbox's timings of launch-bound family
kernels follow the host. A speedup is the cached baseline over the solution's runtime on this
host, so a drift between hosts moves every reward near a speed threshold
(docs/family.md, "Judged twice").

Launch lines (from the repository root):
    # CPU dev machine (the carried cache was timed on other hosts, so few or no keys match):
    python benchmarks/bench_baseline_drift.py --limit 4 --rounds 2 --out drift.json
    # one GPU host, the family's CPU sandbox on its cores, against the carry's baselines:
    mkdir -p /tmp/carried && tar xzf data/family/carry/rewards/family_runs.tar.gz -C /tmp/carried baselines
    python3 benchmarks/bench_baseline_drift.py --carried /tmp/carried --rounds 2 --workers 4 \\
        --out $OUT/drift.json
    # N GPUs: the family's sandbox is the CPU one; one host's cores are what is measured.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_family_load import parse_sets, sandbox_config  # noqa: E402
from bench_family_phases import family_rows  # noqa: E402

KINDS = ("eager", "compile")


def carried_times(tasks: list[tuple[str, Path]], cfg, cache_root: Optional[Path]) -> dict[str, dict]:
    """{task id: {"eager": us, "compile": us}} for the tasks whose baselines ``cache_root`` holds
    under ``cfg`` on this host's device name; tasks it lacks are left out."""
    from sandbox.baselines import cached_baselines

    if cache_root is None:
        return {}
    cfg = replace(cfg, cache_dir=str(cache_root))
    out = {}
    for task_id, path in tasks:
        data = cached_baselines(path, cfg)
        if data:
            out[task_id] = {kind: (data.get(kind) or {}).get("median_us") for kind in KINDS}
    return out


def time_round(tasks: list[tuple[str, Path]], cfg, workers: int, cache_root: Path,
               inductor: Optional[Path] = None) -> dict[str, dict]:
    """{task id: {"eager": us, "compile": us, "seconds": s}} timed afresh into ``cache_root``;
    ``inductor``: torch.compile's cache (generated kernels and their builds) shared with other
    rounds, so that a later round's compile work is what a host holding that cache would pay."""
    from tqdm import tqdm

    from sandbox.baselines_cli import time_tasks

    if inductor is not None:
        inductor.mkdir(parents=True, exist_ok=True)
        cache_root.mkdir(parents=True, exist_ok=True)
        (cache_root / "inductor").symlink_to(inductor, target_is_directory=True)
    cfg = replace(cfg, cache_dir=str(cache_root))
    out = {}
    todo = [(path, task_id) for task_id, path in tasks]
    for record in tqdm(time_tasks(todo, cfg, workers), total=len(todo), unit="task", file=sys.stderr):
        if record.get("cached"):
            raise SystemExit(f"error: {record['id']} came from a cache; each round needs an empty one")
        out[record["id"]] = {"eager": record.get("eager_us"), "compile": record.get("compile_us"),
                             "seconds": record.get("seconds"), "error": record.get("task_error")}
    return out


def host() -> dict:
    """Which machine timed: its name, boot and the sandbox's device name (the cache key's part)."""
    import platform

    import torch

    from sandbox.worker_common import device_name

    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = None
    return {"node": platform.node(), "boot_id": boot, "device": device_name(torch.device("cpu"))}


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def ratio_summary(numer: dict[str, dict], denom: dict[str, dict], kind: str) -> Optional[dict]:
    """The per-task ratios numer/denom of one baseline kind: how many, their median, 10th and
    90th percentiles, and the share of tasks moved by more than 5 % either way."""
    ratios = [numer[t][kind] / denom[t][kind] for t in numer
              if t in denom and numer[t].get(kind) and denom[t].get(kind)]
    if not ratios:
        return None
    return {"n": len(ratios), "median": statistics.median(ratios), "p10": quantile(ratios, 0.1),
            "p90": quantile(ratios, 0.9), "moved_5pct": sum(abs(r - 1) > 0.05 for r in ratios) / len(ratios)}


def comparisons(rounds: list[dict], carried: dict) -> list[dict]:
    """Each round against the carried cache, then each later round against the first."""
    pairs = [(f"round {i + 1} / carried", r, carried) for i, r in enumerate(rounds) if carried]
    pairs += [(f"round {i + 1} / round 1", r, rounds[0]) for i, r in enumerate(rounds) if i]
    out = []
    for name, numer, denom in pairs:
        out.append({"pair": name, **{kind: ratio_summary(numer, denom, kind) for kind in KINDS}})
    return out


def table(rows: list[dict]) -> str:
    lines = ["| ratio of medians | kind | tasks | median | p10 | p90 | moved > 5 % |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        for kind in KINDS:
            s = row[kind]
            if s:
                lines.append(f"| {row['pair']} | {kind} | {s['n']} | {s['median']:.3f} | {s['p10']:.3f} | "
                             f"{s['p90']:.3f} | {s['moved_5pct']:.0%} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--carried", type=Path, default=None, help="a cache root holding baselines/ from earlier calls")
    p.add_argument("--split", default="heldout", help="family split: heldout, train or all")
    p.add_argument("--limit", type=int, default=0, help="the first N tasks of the split (0: all)")
    p.add_argument("--rounds", type=int, default=2, help="fresh timings of every task, each into an empty cache")
    p.add_argument("--workers", type=int, default=1, help="tasks at once (python -m sandbox baselines --workers)")
    p.add_argument("--share-inductor", action="store_true",
                   help="rounds share torch.compile's cache: round 1 compiles, later rounds reuse its kernels")
    p.add_argument("--set", action="append", default=[], help="a sandbox setting, key=value (repeatable)")
    p.add_argument("--out", type=Path, default=None, help="write every timing and the summary here (JSON)")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.workers < 1:
        p.error("--rounds and --workers must be at least 1")
    if args.carried is not None and not (args.carried / "baselines").is_dir():
        p.error(f"--carried {args.carried}: no baselines/ folder in it")
    from src.agent.teacher import write_tasks

    rows = family_rows(args.split, args.limit)
    if not rows:
        p.error(f"no family rows in split {args.split!r}")
    # The family's stages judge with lane_slots 4 and lane_cpus 0 (family_runs.sh); neither is in
    # the baselines' cache key, and the rounds time with the baselines CLI's own lanes.
    cfg = sandbox_config(4, 0, parse_sets(args.set))
    started, rounds, round_seconds, machine = time.monotonic(), [], [], host()
    with tempfile.TemporaryDirectory(prefix="drift_") as work:
        tasks = [(spec.id, path) for spec, path in write_tasks(rows, Path(work) / "tasks")]
        carried = carried_times(tasks, cfg, args.carried)
        print(f"{len(tasks)} tasks; the carried cache holds {len(carried)} of them under this config",
              file=sys.stderr)
        for i in range(args.rounds):  # written after each round, so a call stopped at its limit keeps them
            inductor = Path(work) / "inductor" if args.share_inductor else None
            started_round = time.monotonic()
            rounds.append(time_round(tasks, cfg, args.workers, Path(work) / f"round{i + 1}", inductor))
            round_seconds.append(time.monotonic() - started_round)
            summary = comparisons(rounds, carried)
            if args.out:
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps({
                    "tasks": [t for t, _ in tasks], "carried": carried, "rounds": rounds, "summary": summary,
                    "workers": args.workers, "sets": args.set, "host": machine,
                    "round_seconds": round_seconds, "share_inductor": args.share_inductor,
                    "seconds": time.monotonic() - started}, indent=1))
    print(table(summary))
    print("round seconds: " + ", ".join(f"{x:.0f}" for x in round_seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
