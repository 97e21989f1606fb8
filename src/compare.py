"""Compare training runs without W&B: the curves of every run under the given directories (a
sweep's, a pipeline's, single runs'), one PNG per metric (the paper's ablation figures), and a
Markdown table of each run's final and best values.

    python -m src.compare outputs/sweeps/SWEEP
    python -m src.compare outputs/train/paper outputs/train/no_rft --metric rollout/reward_mean --out cmp

A run is a directory holding metrics.csv (every train.py run writes one, W&B or not); it is named
by its path below the directory given (a sweep job's directory is named from its overrides, a
pipeline's stages by their stage). Writes OUT/<metric>.png and OUT/summary.md (OUT: the first
directory's compare/), and prints the table. Exit status 2 with one line for a path that does
not exist or holds no run.
"""
from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path
from typing import Sequence

# The paper's ablation curves: reward, faster-than-compile rate, entropy, explained variance.
DEFAULT_METRICS = ("rollout/reward_mean", "rollout/faster_than_compile", "actor/entropy", "critic/explained_var")
USAGE_ERROR = 2

Curve = list[tuple[int, float]]


class CompareError(ValueError):
    """Input compare cannot use."""


def find_runs(roots: Sequence[Path]) -> dict[str, Path]:
    """Run label -> run directory, for every metrics.csv under ``roots`` (labels: the path below
    its root, prefixed by the root's name when several roots are given)."""
    runs: dict[str, Path] = {}
    for root in roots:
        if not root.exists():
            raise CompareError(f"{root}: no such directory")
        for path in sorted(root.rglob("metrics.csv")):
            below = path.parent.relative_to(root).as_posix()
            label = below if below != "." else root.name
            runs[f"{root.name}/{below}" if len(roots) > 1 and below != "." else label] = path.parent
    if not runs:
        raise CompareError(f"no run (a directory with metrics.csv) under {', '.join(map(str, roots))}")
    return runs


def read_curves(metrics_csv: Path, names: Sequence[str]) -> dict[str, Curve]:
    """Each metric's (step, value) points, the last value per step (Lightning writes one row per
    logging call, so one step's metrics may span rows)."""
    points: dict[str, dict[int, float]] = {name: {} for name in names}
    with open(metrics_csv, newline="") as f:
        for row in csv.DictReader(f):
            step = row.get("step")
            for name in names:
                value = row.get(name)
                if value not in (None, "") and step not in (None, ""):
                    points[name][int(float(step))] = float(value)
    return {name: sorted(p.items()) for name, p in points.items() if p}


def summary_table(curves: dict[str, dict[str, Curve]], names: Sequence[str]) -> str:
    """Markdown: one row per run, final and best (highest) value of each metric."""
    header = ["run"] + [f"{n} {kind}" for n in names for kind in ("final", "best")]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, run in curves.items():
        cells = [label]
        for name in names:
            values = [v for _, v in run.get(name, []) if not math.isnan(v)]
            cells += [f"{values[-1]:.4g}", f"{max(values):.4g}"] if values else ["-", "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_metric(name: str, curves: dict[str, dict[str, Curve]], out: Path) -> Path | None:
    """One PNG with the curve of ``name`` of every run that logged it; None when none did."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    logged = {label: run[name] for label, run in curves.items() if name in run}
    if not logged:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, curve in logged.items():
        steps, values = zip(*curve)
        ax.plot(steps, values, marker="o" if len(steps) < 20 else None, label=label)
    ax.set(xlabel="step", ylabel=name, title=name)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    path = out / f"{name.replace('/', '_')}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def compare(roots: Sequence[Path], names: Sequence[str] = DEFAULT_METRICS, out: Path | None = None) -> tuple[str, list[Path]]:
    """Plots and table of the runs under ``roots``; returns the table and the PNGs written."""
    runs = find_runs(roots)
    curves = {label: read_curves(path / "metrics.csv", names) for label, path in runs.items()}
    out = out or roots[0] / "compare"
    out.mkdir(parents=True, exist_ok=True)
    pngs = [p for p in (plot_metric(n, curves, out) for n in names) if p is not None]
    table = summary_table(curves, names)
    (out / "summary.md").write_text(table + "\n")
    return table, pngs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m src.compare", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dirs", nargs="+", type=Path, help="sweep, pipeline or run directories")
    parser.add_argument("--metric", action="append", dest="metrics",
                        help=f"metric to draw (repeatable; default: {', '.join(DEFAULT_METRICS)})")
    parser.add_argument("--out", type=Path, default=None, help="output directory (default: DIRS[0]/compare)")
    args = parser.parse_args(argv)
    try:
        table, pngs = compare(args.dirs, tuple(args.metrics or DEFAULT_METRICS), args.out)
    except CompareError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    print(table)
    print(f"{len(pngs)} plots in {pngs[0].parent if pngs else args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
