"""The run report: counts after each stage, rejection reasons, composition table, runtimes.

Written as report.json (machine-readable), report.md (the tables docs/benchmarks.md quotes) and
runtime_hist.png (eager runtimes of every timed candidate, accepted ones highlighted).
"""
from __future__ import annotations

import json
import math
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from .compose import PAPER_OP_COUNT_WEIGHTS, PAPER_TRANSFORMERS_WEIGHT
from .filter import FilterResult
from .filter_worker import RUBRICS

PAPER_MIX = {**{f"torch#{i + 1}": w for i, w in enumerate(PAPER_OP_COUNT_WEIGHTS)},
             "transformers#1": PAPER_TRANSFORMERS_WEIGHT}


NUMBER = re.compile(r"[-+]?\d[\d.e+-]*")


def first_clause(reason: str) -> str:
    """The first line of a reason up to its parenthesised details."""
    return re.sub(r"\(.*", "", reason.splitlines()[0] if reason else "").strip()


def reason_class(reason: str) -> str:
    """Group similar reasons: the first clause with its numbers replaced by N."""
    return NUMBER.sub("N", first_clause(reason)) or "(no reason given)"


def reason_counts(reasons: list[str], top: int) -> dict[str, int]:
    """The ``top`` most common reason classes, each labelled with its numbers put back: a number
    that is the same in every reason of the class as it is, one that varies as its range
    ("eager runtime 0.0123 to 0.41 ms outside [0.5, 100] ms"); the count of reasons per label."""
    groups: dict[str, list[str]] = {}
    for reason in reasons:
        groups.setdefault(reason_class(reason), []).append(first_clause(reason))
    labels = {}
    for cls, members in sorted(groups.items(), key=lambda kv: -len(kv[1]))[:top]:
        columns = iter(number_range(col) for col in zip(*(NUMBER.findall(m) for m in members)))
        labels[NUMBER.sub(lambda _: next(columns), members[0])[:160] or cls] = len(members)
    return labels


def number_range(written: tuple[str, ...]) -> str:
    """One number as written when all agree, else "lowest to highest"."""
    if len(set(written)) == 1:
        return written[0]
    ordered = sorted(written, key=lambda s: float(s) if _is_float(s) else 0.0)
    return f"{ordered[0]} to {ordered[-1]}"


def _is_float(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


@dataclass
class RunStats:
    crawl: dict[str, Any] = field(default_factory=dict)
    composed: Counter = field(default_factory=Counter)
    compose_errors: Counter = field(default_factory=Counter)
    filter_results: list[FilterResult] = field(default_factory=list)
    data_source_of: dict[str, str] = field(default_factory=dict)
    # Filter verdicts reused from an earlier run of the same candidates (resume).
    reused: int = 0
    # Ids of the candidates judged by this run (not reused): the throughput counts only these.
    judged_now: set[str] = field(default_factory=set)
    filter_wall_s: float = 0.0
    decontam: dict[str, Any] = field(default_factory=dict)
    dedupe_dropped: int = 0
    final: Counter = field(default_factory=Counter)

    def verdicts(self) -> list[FilterResult]:
        """Results that are verdicts; a worker error (timeout, crash, device out of memory) is
        not one: a resumed run judges that candidate again."""
        return [r for r in self.filter_results if not r.worker_error]

    def worker_errors(self) -> dict[str, int]:
        return reason_counts([r.worker_error for r in self.filter_results if r.worker_error], top=8)

    def rubric_table(self) -> dict[str, dict[str, int]]:
        table = {r: {"passed": 0, "failed": 0, "not_run": 0} for r in RUBRICS}
        for res in self.verdicts():
            for rubric in RUBRICS:
                passed = res.verdicts.get(rubric, {}).get("passed")
                table[rubric]["passed" if passed else "failed" if passed is False else "not_run"] += 1
        return table

    def rejection_reasons(self) -> dict[str, dict[str, int]]:
        out: dict[str, list[str]] = {}
        for res in self.verdicts():
            rubric = res.first_failure
            if rubric:
                out.setdefault(rubric, []).append(res.verdicts[rubric]["reason"])
        return {r: reason_counts(reasons, top=12) for r, reasons in out.items()}

    def accepted_by_source(self) -> Counter:
        return Counter(self.data_source_of.get(r.id, "?") for r in self.filter_results if r.accepted)

    def summary(self) -> dict[str, Any]:
        accepted = sum(r.accepted for r in self.filter_results)
        hours = self.filter_wall_s / 3600
        now = [r for r in self.filter_results if r.id in self.judged_now]
        return {
            "crawl": self.crawl,
            "compose": {"composed": sum(self.composed.values()), "failed": sum(self.compose_errors.values()),
                        "errors": dict(self.compose_errors.most_common(10))},
            "filter": {"judged": len(self.verdicts()), "reused_from_earlier_run": self.reused,
                       "worker_errors": self.worker_errors(),
                       "not_reached": sum(self.composed.values()) - len(self.filter_results),
                       "accepted": accepted, "rubrics": self.rubric_table(),
                       "rejection_reasons": self.rejection_reasons(), "wall_s": round(self.filter_wall_s, 1),
                       "judged_now": len(now), "accepted_now": sum(r.accepted for r in now),
                       "candidates_per_hour": round(len(now) / hours, 1) if hours > 0 else None,
                       "accepted_per_hour": round(sum(r.accepted for r in now) / hours, 1) if hours > 0 else None,
                       "stage_s_median": stage_medians(now)},
            "decontaminate": self.decontam,
            "dedupe": {"dropped": self.dedupe_dropped},
            "final": {"rows": sum(self.final.values())},
            "composition": self.composition(),
        }

    def composition(self) -> list[dict[str, Any]]:
        stages = {"composed": self.composed, "accepted": self.accepted_by_source(), "final": self.final}
        rows = []
        for source in sorted(set(PAPER_MIX) | {k for c in stages.values() for k in c}, key=source_order):
            row: dict[str, Any] = {"data_source": source, "paper_pct": PAPER_MIX.get(source)}
            for stage, counts in stages.items():
                total = sum(counts.values())
                row[stage] = counts.get(source, 0)
                row[f"{stage}_pct"] = round(100 * counts.get(source, 0) / total, 2) if total else 0.0
            rows.append(row)
        return rows


def stage_medians(results: list[FilterResult]) -> dict[str, float]:
    """Median seconds per rubric over the candidates that ran it, and of the worker's start-up
    (wall time minus its rubrics): where a long run's time goes."""
    def median(values: list[float]) -> float:
        return round(statistics.median_high(values), 2) if values else 0.0

    out = {r: median([res.stage_s[r] for res in results if r in res.stage_s]) for r in RUBRICS}
    out["worker_startup"] = median([res.wall_s - sum(res.stage_s.values()) for res in results
                                    if res.stage_s and not res.worker_error])
    return out


def source_order(source: str) -> tuple[int, int]:
    lib, _, n = source.partition("#")
    return (0 if lib == "torch" else 1, int(n) if n.isdigit() else 99)


def markdown(summary: dict[str, Any]) -> str:
    f = summary["filter"]
    lines = ["# data_gen run report", "", "## Counts per stage", "",
             "| stage | count |", "|---|---|",
             f"| crawled torch ops usable / found | {summary['crawl'].get('torch', {}).get('usable')} / "
             f"{summary['crawl'].get('torch', {}).get('found')} |",
             f"| crawled transformers ops usable / found | {summary['crawl'].get('transformers', {}).get('usable')} / "
             f"{summary['crawl'].get('transformers', {}).get('found')} |",
             f"| composed (failed) | {summary['compose']['composed']} ({summary['compose']['failed']}) |",
             f"| judged by the filter | {f['judged']} |",
             f"| left for a rerun (worker error: timeout, crash, device memory) | {sum(f['worker_errors'].values())} |",
             f"| left for a rerun (not reached within the time budget) | {f['not_reached']} |",
             f"| accepted by all rubrics | {f['accepted']} |",
             f"| dropped by decontamination | {summary['decontaminate'].get('dropped', 'n/a')} |",
             f"| dropped as duplicates | {summary['dedupe']['dropped']} |", f"| final rows | {summary['final']['rows']} |",
             "", throughput_line(f), "", "## Rubrics", "", "| rubric | passed | failed | not run |",
             "|---|---|---|---|"]
    lines += [f"| {r} | {v['passed']} | {v['failed']} | {v['not_run']} |" for r, v in f["rubrics"].items()]
    lines += ["", "## Rejection reasons (first failing rubric)", "", "| rubric | reason | count |", "|---|---|---|"]
    lines += [f"| {r} | {reason.replace('|', '/')} | {n} |" for r, reasons in f["rejection_reasons"].items()
              for reason, n in reasons.items()]
    if f["worker_errors"]:
        lines += ["", "## Worker errors (no verdict; judged again on resume)", "", "| cause | count |", "|---|---|"]
        lines += [f"| {cause.replace('|', '/')} | {n} |" for cause, n in f["worker_errors"].items()]
    lines += ["", "## Composition", "", "| data_source | paper % | composed | accepted | final | final % |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {row['data_source']} | {row['paper_pct'] if row['paper_pct'] is not None else '-'} | "
              f"{row['composed']} | {row['accepted']} | {row['final']} | {row['final_pct']} |"
              for row in summary["composition"]]
    notes = summary["crawl"].get("notes", []) + ([summary["decontaminate"]["note"]]
                                                 if summary["decontaminate"].get("note") else [])
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def throughput_line(f: dict[str, Any]) -> str:
    if not f["judged_now"]:
        return "No candidate was judged by this run: every verdict was reused from earlier chunks."
    return (f"Filter wall time {f['wall_s']} s for the {f['judged_now']} candidates judged by this run "
            f"({f['accepted_now']} accepted): {f['candidates_per_hour']} candidates/h; {f['accepted_per_hour']} "
            "accepted/h.\n\nMedian seconds per candidate: "
            + ", ".join(f"{k} {v}" for k, v in f["stage_s_median"].items()) + ".")


def runtime_histogram(results: list[FilterResult], window_ms: tuple[float, float], path: Path) -> Optional[Path]:
    """Log-scale histogram of eager runtimes; None when nothing was timed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    timed = [r for r in results if r.eager_ms]
    if not timed:
        return None
    values = [r.eager_ms for r in timed]
    lo, hi = min(values + [window_ms[0]]), max(values + [window_ms[1]])
    bins = [10 ** x for x in frange(math.log10(lo) - 0.1, math.log10(hi) + 0.1, 30)]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.hist(values, bins=bins, color="0.75", label=f"timed ({len(values)})")
    ax.hist([r.eager_ms for r in timed if r.accepted], bins=bins, color="tab:green",
            label=f"accepted ({sum(r.accepted for r in timed)})")
    for edge in window_ms:
        ax.axvline(edge, color="tab:red", linestyle="--")
    ax.set_xscale("log")
    ax.set_xlabel("eager runtime (ms)")
    ax.set_ylabel("tasks")
    ax.set_title(f"Eager runtime; window [{window_ms[0]:g}, {window_ms[1]:g}] ms")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def frange(start: float, stop: float, n: int) -> list[float]:
    return [start + (stop - start) * i / n for i in range(n + 1)]


def write_report(stats: RunStats, out_dir: Path, window_ms: tuple[float, float]) -> dict[str, Any]:
    summary = stats.summary()
    hist = runtime_histogram(stats.filter_results, window_ms, out_dir / "runtime_hist.png")
    summary["runtime_histogram"] = str(hist) if hist else None
    (out_dir / "report.json").write_text(json.dumps(summary, indent=1))
    (out_dir / "report.md").write_text(markdown(summary))
    return summary
