"""The paper's benchmark metrics and KernelBench's fast_p: pure functions of per-task results.

A *row* is one task's result as written to results.jsonl: the sandbox's Measurement fields
(``compiled``, ``correct``, ``violations``, ``error``, ``runtime_us``, ``eager_us``,
``compile_us``, ...) plus ``level``. Every task of the selection has exactly one row; a missing
solution, an invalid one or a task the reference could not run is a row that did not pass.

Definitions (n = number of rows = ALL tasks of the selection, never only the attempted ones):
- passed: compiled, correct, no guard violation, no error (``sandbox.reward.passed``);
- pass rate: passed / n;
- faster-than-eager / -compile rate: (passed and runtime more than 5% below the baseline's, the
  paper's b(t, t0) = (t0 - t) / t0 > 0.05, ``sandbox.reward.meaningfully_faster``) / n; a task
  without that baseline's time never counts as faster, and when tasks passed but none of them
  has one (the compile baseline switched off) the rate is None ("n/a"), not 0;
- geometric-mean speedup vs eager / compile: exp(mean(log(t0 / t))) over the passed rows that
  have the baseline's time (failures are not in it; None when no row qualifies);
- fast_p (KernelBench): (passed and t_eager / t > p) / n, strictly greater; fast_0 = pass rate
  (fast_p against torch.compile too, None like the rates above when it was not measured);
- violations by kind: number of tasks with at least one violation of each kind (the text before
  the first ':' of a violation, e.g. ``torch_op``, ``input_mutation``);
- errors by kind: number of tasks per ``error`` value (``mismatch``, ``missing_solution``, ...).
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Any, Iterable, Mapping, Optional, Sequence

from sandbox.measurement import Measurement
from sandbox.reward import SPEEDUP_MARGIN, meaningfully_faster, passed

Row = Mapping[str, Any]

# KernelBench's reported thresholds; fast_0 equals the pass rate.
FAST_P_THRESHOLDS = (0.0, 1.0, 1.5, 2.0)
# (t0 - t) / t0 > margin  <=>  t0 / t > 1 / (1 - margin): the speedup a "faster" task must beat.
SPEEDUP_BAR = 1.0 / (1.0 - SPEEDUP_MARGIN)
# The two baselines every metric is computed against: row field of each baseline's runtime.
BASELINES = {"eager": "eager_us", "compile": "compile_us"}


def row_passed(row: Row) -> bool:
    """The reward's precondition, read off a results row."""
    return passed(Measurement.from_dict(dict(row)))


def pass_rate(rows: Sequence[Row]) -> Optional[float]:
    """Fraction of all tasks that passed; None for no tasks."""
    return _fraction(rows, row_passed)


def faster_rate(rows: Sequence[Row], baseline: str) -> Optional[float]:
    """Fraction of all tasks that passed AND run more than 5% faster than ``baseline``; None
    when that baseline was not measured (see ``measured``)."""
    field = BASELINES[baseline]
    if not measured(rows, baseline):
        return None
    return _fraction(rows, lambda r: row_passed(r) and meaningfully_faster(r.get("runtime_us"), r.get(field)))


def measured(rows: Sequence[Row], baseline: str) -> bool:
    """False when tasks passed but none has a time for ``baseline`` (the compile baseline can be
    switched off): then no speed metric against it can be told. With no passed task every rate
    is simply 0."""
    passed_rows = [r for r in rows if row_passed(r)]
    return not passed_rows or any(r.get(BASELINES[baseline]) is not None for r in passed_rows)


def speedups(rows: Sequence[Row], baseline: str) -> list[float]:
    """t_baseline / t of every passed row that has both times, in row order."""
    field = BASELINES[baseline]
    found = []
    for row in rows:
        t, t0 = row.get("runtime_us"), row.get(field)
        if row_passed(row) and t and t0:
            found.append(t0 / t)
    return found


def geomean_speedup(rows: Sequence[Row], baseline: str) -> Optional[float]:
    """Geometric mean of the passed rows' speedups over ``baseline``; None when there are none."""
    values = speedups(rows, baseline)
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def fast_p(rows: Sequence[Row], p: float, baseline: str = "eager") -> Optional[float]:
    """KernelBench's fast_p: fraction of all tasks that passed with speedup strictly above p;
    None when the baseline was not measured (see ``measured``)."""
    field = BASELINES[baseline]
    if not measured(rows, baseline):
        return None

    def fast(row: Row) -> bool:
        t, t0 = row.get("runtime_us"), row.get(field)
        return row_passed(row) and bool(t) and t0 is not None and t0 / t > p

    return _fraction(rows, fast)


def violation_counts(rows: Iterable[Row]) -> dict[str, int]:
    """Tasks with at least one violation of each kind (kind = text before the first ':')."""
    counts: Counter[str] = Counter()
    for row in rows:
        counts.update({str(v).split(":", 1)[0].strip() for v in row.get("violations") or []})
    return dict(sorted(counts.items()))


def error_counts(rows: Iterable[Row]) -> dict[str, int]:
    """Tasks per failure cause (the ``error`` field); passed rows have none."""
    counts = Counter(row["error"] for row in rows if row.get("error"))
    return dict(sorted(counts.items()))


def summarize(rows: Sequence[Row], thresholds: Sequence[float] = FAST_P_THRESHOLDS) -> dict[str, Any]:
    """Every metric of one group of tasks (a level, or all of them)."""
    summary: dict[str, Any] = {
        "tasks": len(rows),
        "passed": sum(row_passed(r) for r in rows),
        "pass_rate": pass_rate(rows),
    }
    for baseline in BASELINES:
        summary[f"faster_than_{baseline}_rate"] = faster_rate(rows, baseline)
        summary[f"geomean_speedup_vs_{baseline}"] = geomean_speedup(rows, baseline)
        summary[f"speedups_vs_{baseline}_counted"] = len(speedups(rows, baseline))
    summary["fast_p"] = {_p_label(p): fast_p(rows, p) for p in thresholds}
    summary["fast_p_vs_compile"] = {_p_label(p): fast_p(rows, p, "compile") for p in thresholds}
    summary["violations"] = violation_counts(rows)
    summary["errors"] = error_counts(rows)
    return summary


def summarize_by_level(rows: Sequence[Row]) -> dict[str, dict[str, Any]]:
    """``{"level1": ..., "level2": ..., "overall": ...}``: each level's summary and all together."""
    out = {f"level{level}": summarize([r for r in rows if r["level"] == level])
           for level in sorted({r["level"] for r in rows})}
    out["overall"] = summarize(rows)
    return out


def _p_label(p: float) -> str:
    """fast_p keys as KernelBench writes them: fast_0, fast_1, fast_1.5, fast_2."""
    return f"fast_{p:g}"


def _fraction(rows: Sequence[Row], predicate) -> Optional[float]:
    if not rows:
        return None
    return sum(1 for r in rows if predicate(r)) / len(rows)
