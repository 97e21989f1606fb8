"""The benchmark metrics against numbers worked out by hand (src/evaluation/metrics.py).

Six tasks. Level 1: a passes (50 us vs eager 100, compile 80: 2.0x / 1.6x), b passes at exactly
eager's time (1.0x; 2.0x vs compile 200), c is wrong, d breaks two guard kinds. Level 2: e passes
(25 us vs 100 / 50: 4.0x / 2.0x), f has no solution.
"""
import math

import pytest

from src.evaluation.metrics import (FAST_P_THRESHOLDS, SPEEDUP_BAR, error_counts, fast_p, faster_rate,
                                    geomean_speedup, pass_rate, row_passed, speedups, summarize,
                                    summarize_by_level, violation_counts)


def row(level, runtime=None, eager=None, compile=None, error=None, violations=(), compiled=True):
    return {"level": level, "compiled": compiled, "correct": error is None, "violations": list(violations),
            "error": error, "runtime_us": runtime, "eager_us": eager, "compile_us": compile}


A = row(1, runtime=50.0, eager=100.0, compile=80.0)
B = row(1, runtime=100.0, eager=100.0, compile=200.0)
C = row(1, eager=100.0, compile=80.0, error="mismatch")
D = row(1, eager=100.0, error="violation",
        violations=["torch_op: aten.add.Tensor ran inside forward (5x)", "torch_op: aten.mul.Tensor (5x)",
                    "library: libmkl_rt.so mapped"])
E = row(2, runtime=25.0, eager=100.0, compile=50.0)
F = row(2, error="missing_solution", compiled=False)
ROWS = [A, B, C, D, E, F]


def test_pass_rate_counts_all_tasks():
    assert pass_rate(ROWS) == 3 / 6


def test_faster_than_eager_needs_more_than_five_percent():
    # a: 50% less time; b: 0%; e: 75% less.
    assert faster_rate(ROWS, "eager") == 2 / 6


def test_faster_than_compile_rate():
    # a: (80 - 50) / 80 = 37.5%; b: 50%; e: 50%.
    assert faster_rate(ROWS, "compile") == 3 / 6


def test_geomean_speedup_is_over_passed_tasks_only():
    assert geomean_speedup(ROWS, "eager") == pytest.approx((2.0 * 1.0 * 4.0) ** (1 / 3))  # = 2.0
    assert geomean_speedup(ROWS, "eager") == pytest.approx(2.0)
    assert geomean_speedup(ROWS, "compile") == pytest.approx((1.6 * 2.0 * 2.0) ** (1 / 3))


def test_fast_p_is_strictly_greater_over_all_tasks():
    # speedups vs eager of the passed tasks: 2.0, 1.0, 4.0
    assert fast_p(ROWS, 0.0) == 3 / 6 == pass_rate(ROWS)
    assert fast_p(ROWS, 1.0) == 2 / 6   # 1.0 is not > 1
    assert fast_p(ROWS, 1.5) == 2 / 6
    assert fast_p(ROWS, 2.0) == 1 / 6   # 2.0 is not > 2
    assert fast_p(ROWS, 4.0) == 0.0


def test_fast_p_against_compile():
    # speedups vs compile: 1.6, 2.0, 2.0
    assert fast_p(ROWS, 1.5, "compile") == 3 / 6
    assert fast_p(ROWS, 1.6, "compile") == 2 / 6


def test_five_percent_boundary():
    exactly = row(1, runtime=95.0, eager=100.0)
    just_over = row(1, runtime=94.9, eager=100.0)
    assert faster_rate([exactly], "eager") == 0.0
    assert faster_rate([just_over], "eager") == 1.0
    assert SPEEDUP_BAR == pytest.approx(1 / 0.95)


def test_violations_count_tasks_per_kind():
    again = row(2, eager=1.0, error="violation", violations=["torch_op: aten.relu.default ran inside forward"])
    assert violation_counts(ROWS) == {"library": 1, "torch_op": 1}
    assert violation_counts(ROWS + [again]) == {"library": 1, "torch_op": 2}


def test_errors_count_tasks_per_cause():
    assert error_counts(ROWS) == {"mismatch": 1, "missing_solution": 1, "violation": 1}


def test_a_violation_fails_even_if_outputs_matched():
    hacked = dict(A, violations=["backend_flag: torch.backends.cuda.matmul.allow_tf32 flipped"])
    assert row_passed(A) and not row_passed(hacked)
    assert speedups([hacked], "eager") == []


def test_compile_metrics_are_unknown_when_compile_was_not_timed():
    no_compile = [dict(A, compile_us=None), dict(F)]
    assert faster_rate(no_compile, "compile") is None
    assert geomean_speedup(no_compile, "compile") is None
    assert fast_p(no_compile, 1.0, "compile") is None
    assert faster_rate(no_compile, "eager") == 1 / 2


def test_nothing_passed_gives_zero_rates_and_no_geomean():
    assert faster_rate([C, F], "compile") == 0.0
    assert fast_p([C, F], 0.0) == 0.0
    assert geomean_speedup([C, F], "eager") is None


def test_no_tasks_gives_none():
    assert pass_rate([]) is None and fast_p([], 1.0) is None


def test_summary_per_level_and_overall():
    levels = summarize_by_level(ROWS)
    assert list(levels) == ["level1", "level2", "overall"]
    one, two = levels["level1"], levels["level2"]
    assert (one["tasks"], one["passed"], one["pass_rate"]) == (4, 2, 0.5)
    assert one["faster_than_eager_rate"] == 1 / 4 and one["faster_than_compile_rate"] == 2 / 4
    assert one["geomean_speedup_vs_eager"] == pytest.approx(math.sqrt(2.0 * 1.0))
    assert one["geomean_speedup_vs_compile"] == pytest.approx(math.sqrt(1.6 * 2.0))
    assert one["fast_p"] == {"fast_0": 0.5, "fast_1": 0.25, "fast_1.5": 0.25, "fast_2": 0.0}
    assert one["violations"] == {"library": 1, "torch_op": 1}
    assert one["errors"] == {"mismatch": 1, "violation": 1}
    assert (two["pass_rate"], two["faster_than_eager_rate"], two["faster_than_compile_rate"]) == (0.5, 0.5, 0.5)
    assert two["geomean_speedup_vs_eager"] == pytest.approx(4.0)
    assert two["fast_p"] == {"fast_0": 0.5, "fast_1": 0.5, "fast_1.5": 0.5, "fast_2": 0.5}
    assert levels["overall"] == summarize(ROWS)
    assert levels["overall"]["fast_p"] == {"fast_0": 0.5, "fast_1": 2 / 6, "fast_1.5": 2 / 6, "fast_2": 1 / 6}
    assert levels["overall"]["speedups_vs_compile_counted"] == 3


def test_thresholds_are_kernelbenchs():
    assert FAST_P_THRESHOLDS == (0.0, 1.0, 1.5, 2.0)
