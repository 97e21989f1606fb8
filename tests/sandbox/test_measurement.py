"""Tests for sandbox.measurement: timing statistics, serialisation, speedups and failure recording."""
import json
import math

import pytest

from sandbox.measurement import ErrorKind, Measurement, TimingStats


def test_timing_stats_from_samples_hand_computed():
    s = TimingStats.from_samples([1, 2, 3, 4, 100])
    assert s.median_us == 3
    assert s.min_us == 1
    assert s.max_us == 100
    assert s.p25_us == 2
    assert s.p75_us == 4
    assert s.mean_us == 22
    # deviations -21, -20, -19, -18, 78 -> squares sum 7610; sample variance 7610 / 4 = 1902.5
    assert s.std_us == pytest.approx(math.sqrt(1902.5))
    assert s.std_us == pytest.approx(43.6176, abs=1e-4)
    assert s.n == 5


def test_timing_stats_sorts_unordered_samples():
    s = TimingStats.from_samples([100, 3, 1, 4, 2])
    assert (s.min_us, s.p25_us, s.median_us, s.p75_us, s.max_us) == (1, 2, 3, 4, 100)


def test_timing_stats_interpolates_even_count():
    # [10, 20, 30, 40]: median at pos 1.5 -> 25; p25 at pos 0.75 -> 17.5; p75 at pos 2.25 -> 32.5
    s = TimingStats.from_samples([40, 10, 30, 20])
    assert s.median_us == 25
    assert s.p25_us == 17.5
    assert s.p75_us == 32.5


def test_timing_stats_single_sample_has_zero_std():
    s = TimingStats.from_samples([7.5])
    assert s.median_us == s.min_us == s.max_us == s.p25_us == s.p75_us == 7.5
    assert s.std_us == 0.0 and s.n == 1


def _full_measurement():
    return Measurement(
        compiled=True, correct=True, violations=[], runtime_us=120.0, eager_us=300.0,
        compile_us=240.0, runtime_stats=TimingStats.from_samples([110.0, 120.0, 130.0]),
        eager_stats=TimingStats.from_samples([1, 2, 3, 4, 100]), compile_stats=None,
        trials_passed=5, num_trials=5, max_abs_diff=1.5e-5, backend="cpu", device="cpu",
        solution_form="workspace", tolerance="kernelbench", baseline_cached=True,
        stage_seconds={"build": 1.25, "run": 0.5}, logs={"build": "ok"},
    )


def test_to_dict_from_dict_round_trip_keeps_stats():
    m = _full_measurement()
    back = Measurement.from_dict(m.to_dict())
    assert back == m
    assert isinstance(back.runtime_stats, TimingStats)
    assert back.eager_stats.std_us == pytest.approx(math.sqrt(1902.5))
    assert back.compile_stats is None


def test_round_trip_through_json():
    m = _full_measurement()
    back = Measurement.from_dict(json.loads(json.dumps(m.to_dict())))
    assert back == m


def test_to_dict_includes_speedups():
    d = _full_measurement().to_dict()
    assert d["speedup_vs_eager"] == pytest.approx(2.5)
    assert d["speedup_vs_compile"] == pytest.approx(2.0)
    assert d["runtime_stats"]["median_us"] == 120.0


def test_from_dict_ignores_unknown_keys():
    m = Measurement.from_dict({"compiled": True, "speedup_vs_eager": 9.0, "bogus": 1})
    assert m.compiled is True and m.correct is False


def test_speedup_is_eager_over_runtime_when_correct():
    m = Measurement(compiled=True, correct=True, runtime_us=120.0, eager_us=300.0, compile_us=60.0)
    assert m.speedup_vs_eager == pytest.approx(2.5)
    assert m.speedup_vs_compile == pytest.approx(0.5)


def test_speedup_is_none_when_not_correct():
    m = Measurement(compiled=True, correct=False, runtime_us=120.0, eager_us=300.0, compile_us=60.0)
    assert m.speedup_vs_eager is None
    assert m.speedup_vs_compile is None


def test_speedup_is_none_without_baseline_or_runtime():
    assert Measurement(correct=True, runtime_us=100.0).speedup_vs_compile is None
    assert Measurement(correct=True, eager_us=100.0).speedup_vs_eager is None
    assert Measurement(correct=True, runtime_us=0.0, eager_us=100.0).speedup_vs_eager is None


def test_fail_records_kind_and_detail_and_clears_correct():
    m = Measurement(compiled=True, correct=True)
    assert m.fail(ErrorKind.MISMATCH, "output[0] differs") is m
    assert m.error == "mismatch"
    assert m.error_detail == "output[0] differs"
    assert m.correct is False


def test_fail_keeps_first_error():
    m = Measurement(compiled=True, correct=True)
    m.fail(ErrorKind.COMPILE_ERROR, "nvcc said no")
    m.fail(ErrorKind.RUNTIME_ERROR, "later failure")
    assert m.error == ErrorKind.COMPILE_ERROR
    assert m.error_detail == "nvcc said no"
    assert m.correct is False
