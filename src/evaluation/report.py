"""What an evaluation run writes: per-task results (JSONL), a summary (JSON + Markdown), plots.

    results.jsonl   one row per task: level, problem_id, name, task, solution, every field of the
                    sandbox's Measurement (Measurement.to_dict()), reward, reward_name, task_error
    summary.json    metrics per level and overall (src/evaluation/metrics.py defines each)
    summary.md      the same as Markdown tables
    fast_p.png      fast_p (vs eager) as the threshold p varies, one line per level
    speedups.png    distribution of speedups vs eager and vs torch.compile per level
"""
from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

from .metrics import FAST_P_THRESHOLDS, SPEEDUP_BAR, row_passed, speedups, summarize_by_level

log = logging.getLogger(__name__)

RESULTS_FILE = "results.jsonl"
SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"
FAST_P_PLOT = "fast_p.png"
SPEEDUP_PLOT = "speedups.png"


# ------------------------------------------------------------------------------ results.jsonl

class ResultsFileError(ValueError):
    """results.jsonl is damaged beyond a last line cut short."""


def read_results(path: Path) -> list[dict[str, Any]]:
    """Rows already written; a last line cut short by a crash is dropped from the file."""
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    rows, good = [], []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
            good.append(line)
        except ValueError:
            if number < len(lines) - 1:  # only the last, unterminated line may be damaged
                raise ResultsFileError(f"{path}:{number} is not valid JSON; fix or delete the file") from None
            log.warning("%s: dropping a last line cut short (%d characters)", path, len(line))
    if text and not text.endswith("\n"):
        path.write_text("".join(g + "\n" for g in good), encoding="utf-8")
    return rows


def append_result(handle, row: Mapping[str, Any]) -> None:
    """One row per line, flushed and synced: a crash loses at most the row being written."""
    handle.write(json.dumps(row) + "\n")
    handle.flush()
    os.fsync(handle.fileno())


# ------------------------------------------------------------------------------ summary

def write_summary(rows: Sequence[Mapping[str, Any]], out_dir: Path,
                  context: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """summary.json and summary.md from the rows of every selected task; returns the summary."""
    summary = {"context": dict(context or {}), "levels": summarize_by_level(rows)}
    (out_dir / SUMMARY_JSON).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    (out_dir / SUMMARY_MD).write_text(markdown_summary(summary["levels"]), encoding="utf-8")
    return summary


def markdown_summary(levels: Mapping[str, Mapping[str, Any]]) -> str:
    """Main metrics per level, then failure causes and guard violations per level."""
    p_labels = [f"fast_{p:g}" for p in FAST_P_THRESHOLDS]
    header = ["", "tasks", "pass", "faster than eager", "faster than compile",
              "geomean vs eager", "geomean vs compile", *p_labels]
    lines = ["# Benchmark summary", "",
             "Rates are fractions of all tasks; geometric means are over passed tasks; "
             "fast_p uses the eager baseline.", "",
             _table_row(header), _table_row(["---"] * len(header))]
    for name, s in levels.items():
        lines.append(_table_row([name, str(s["tasks"]), _pct(s["pass_rate"]),
                                 _pct(s["faster_than_eager_rate"]), _pct(s["faster_than_compile_rate"]),
                                 _times(s["geomean_speedup_vs_eager"]), _times(s["geomean_speedup_vs_compile"]),
                                 *[_pct(s["fast_p"][label]) for label in p_labels]]))
    lines += ["", "## Failures by cause (tasks)", "", *_count_table(levels, "errors"),
              "", "## Guard violations by kind (tasks)", "", *_count_table(levels, "violations"), ""]
    return "\n".join(lines)


def _count_table(levels: Mapping[str, Mapping[str, Any]], field: str) -> list[str]:
    kinds = sorted({kind for s in levels.values() for kind in s[field]})
    if not kinds:
        return ["none"]
    rows = [_table_row(["", *kinds]), _table_row(["---"] * (len(kinds) + 1))]
    for name, s in levels.items():
        rows.append(_table_row([name, *[str(s[field].get(k, 0)) for k in kinds]]))
    return rows


def _table_row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _pct(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _times(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


# ------------------------------------------------------------------------------ plots

def write_plots(rows: Sequence[Mapping[str, Any]], out_dir: Path) -> list[Path]:
    """fast_p.png and speedups.png (matplotlib, no display needed)."""
    import matplotlib

    matplotlib.use("Agg")  # headless: evaluation machines have no display
    import matplotlib.pyplot as plt

    groups = _level_groups(rows)
    paths = [_plot_fast_p(plt, groups, out_dir / FAST_P_PLOT),
             _plot_speedups(plt, groups, out_dir / SPEEDUP_PLOT)]
    plt.close("all")
    return paths


def _level_groups(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    groups = {f"level {level}": [r for r in rows if r["level"] == level]
              for level in sorted({r["level"] for r in rows})}
    groups["overall"] = list(rows)
    return groups


def _plot_fast_p(plt, groups, path: Path) -> Path:
    """fast_p against p from 0 to past the largest speedup: where each curve drops to zero."""
    top = max([2.5, *[1.1 * s for rows in groups.values() for s in speedups(rows, "eager")]])
    grid = [top * i / 400 for i in range(401)]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, rows in groups.items():
        style = {"color": "black", "linewidth": 2.2} if name == "overall" else {}
        # fast_p(rows, p) for every p of the grid, from the speedups computed once.
        values = speedups(rows, "eager")
        ax.step(grid, [sum(v > p for v in values) / len(rows) for p in grid], where="post", label=name, **style)
    for p in FAST_P_THRESHOLDS[1:]:
        ax.axvline(p, color="grey", linestyle=":", linewidth=0.8)
    ax.set(xlabel="speedup threshold p (vs eager)", ylabel="fast_p (fraction of all tasks)",
           title="KernelBench fast_p", ylim=(-0.02, 1.02), xlim=(0, top))
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def _plot_speedups(plt, groups, path: Path) -> Path:
    """Passed tasks' speedups per level (log scale), with the >5%-faster bar marked."""
    names = [n for n in groups if n != "overall"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    for ax, baseline in zip(axes, ("eager", "compile")):
        for i, name in enumerate(names, 1):
            values = speedups(groups[name], baseline)
            if values:
                ax.boxplot(values, positions=[i], widths=0.5, showfliers=False)
                ax.scatter([i] * len(values), values, s=14, alpha=0.7, zorder=3)
            else:
                why = "not measured" if any(row_passed(r) for r in groups[name]) else "none passed"
                ax.text(i, 0.25, why, ha="center", fontsize=8, color="grey", transform=ax.get_xaxis_transform())
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.axhline(SPEEDUP_BAR, color="tab:red", linestyle="--", linewidth=0.8, label="> 5% faster")
        ax.set_yscale("log")
        ax.set_xticks(range(1, len(names) + 1), names)
        ax.set(title=f"speedup vs {'torch.compile' if baseline == 'compile' else 'eager'}",
               xlim=(0.4, len(names) + 0.6))
        ax.legend(loc="upper right", fontsize=8)
    axes[0].set_ylabel("baseline time / solution time")
    _set_log_limits(axes, [s for n in names for b in ("eager", "compile") for s in speedups(groups[n], b)])
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def _set_log_limits(axes, values: list[float]) -> None:
    """Show 1x and the 5% bar even when every solution is far from them (or none passed)."""
    low = min([0.8, *values])
    high = max([1.25, *values])
    pad = math.exp(0.1 * (math.log(high) - math.log(low)))
    for ax in axes:
        ax.set_ylim(low / pad, high * pad)
