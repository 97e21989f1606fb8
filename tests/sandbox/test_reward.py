"""Tests for sandbox.reward: the paper's Eq. 1 (graduated), binary and continuous rewards."""
import pytest

from sandbox.measurement import ErrorKind, Measurement
from sandbox.reward import (REWARDS, binary_reward, continuous_reward, graduated_reward,
                            meaningfully_faster, reward_fn)


def ok(runtime_us=None, eager_us=None, compile_us=None, **kw):
    """A compiled, correct measurement with the given timings."""
    return Measurement(compiled=True, correct=True, runtime_us=runtime_us, eager_us=eager_us,
                       compile_us=compile_us, **kw)


# --- graduated_reward: failures ----------------------------------------------------------------

def test_graduated_incorrect_is_minus_one_even_when_fast():
    m = Measurement(compiled=True, correct=False, runtime_us=1.0, eager_us=100.0, compile_us=100.0)
    assert graduated_reward(m) == -1.0


def test_graduated_not_compiled_is_minus_one():
    m = Measurement(compiled=False, correct=True, runtime_us=1.0, eager_us=100.0, compile_us=100.0)
    assert graduated_reward(m) == -1.0


def test_graduated_violation_is_minus_one():
    assert graduated_reward(ok(1.0, 100.0, 100.0, violations=["stream_sync"])) == -1.0


def test_graduated_error_set_is_minus_one():
    assert graduated_reward(ok(1.0, 100.0, 100.0, error=ErrorKind.TIMEOUT)) == -1.0


def test_graduated_default_measurement_is_minus_one():
    assert graduated_reward(Measurement()) == -1.0


# --- graduated_reward: speed tiers -------------------------------------------------------------

def test_graduated_beats_both_baselines_is_three():
    assert graduated_reward(ok(runtime_us=50.0, eager_us=100.0, compile_us=80.0)) == 3.0


def test_graduated_beats_eager_only_is_two():
    # 90 vs eager 100: 10% faster; 90 vs compile 80: slower.
    assert graduated_reward(ok(runtime_us=90.0, eager_us=100.0, compile_us=80.0)) == 2.0


def test_graduated_beats_compile_only_is_one():
    # 90 vs compile 100: 10% faster; 90 vs eager 80: slower -> not in the "faster than eager" tier.
    assert graduated_reward(ok(runtime_us=90.0, eager_us=80.0, compile_us=100.0)) == 1.0


def test_graduated_slower_than_both_is_one():
    assert graduated_reward(ok(runtime_us=200.0, eager_us=100.0, compile_us=100.0)) == 1.0


def test_graduated_exactly_five_percent_faster_than_eager_does_not_count():
    # (100 - 95) / 100 == 0.05, which is not strictly more than the 5% margin.
    assert graduated_reward(ok(runtime_us=95.0, eager_us=100.0, compile_us=1000.0)) == 1.0


def test_graduated_exactly_five_percent_faster_than_both_is_one():
    assert graduated_reward(ok(runtime_us=95.0, eager_us=100.0, compile_us=100.0)) == 1.0


def test_graduated_5_01_percent_faster_than_eager_counts():
    # (100 - 94.99) / 100 = 0.0501 > 0.05; compile 90 is not beaten.
    assert graduated_reward(ok(runtime_us=94.99, eager_us=100.0, compile_us=90.0)) == 2.0


def test_graduated_5_01_percent_faster_than_both_is_three():
    assert graduated_reward(ok(runtime_us=94.99, eager_us=100.0, compile_us=100.0)) == 3.0


def test_graduated_exactly_five_percent_faster_than_compile_stays_two():
    # eager beaten by 50%; compile 200 -> (200 - 190) / 200 == 0.05, not beaten.
    assert graduated_reward(ok(runtime_us=190.0, eager_us=380.0, compile_us=200.0)) == 2.0


def test_graduated_missing_compile_time_caps_at_two():
    assert graduated_reward(ok(runtime_us=1.0, eager_us=100.0, compile_us=None)) == 2.0


def test_graduated_missing_eager_time_caps_at_one():
    assert graduated_reward(ok(runtime_us=1.0, eager_us=None, compile_us=100.0)) == 1.0


def test_graduated_missing_runtime_is_one_when_correct():
    assert graduated_reward(ok(runtime_us=None, eager_us=100.0, compile_us=100.0)) == 1.0


def test_graduated_custom_margin_changes_tier():
    # 20% faster than eager: counts at margin 0.1, not at margin 0.25.
    m = ok(runtime_us=80.0, eager_us=100.0, compile_us=None)
    assert graduated_reward(m, margin=0.1) == 2.0
    assert graduated_reward(m, margin=0.25) == 1.0


def test_meaningfully_faster_rejects_zero_or_negative_baseline():
    assert meaningfully_faster(1.0, 0.0) is False
    assert meaningfully_faster(1.0, -5.0) is False


# --- binary_reward -----------------------------------------------------------------------------

def test_binary_correct_slow_solution_is_one():
    assert binary_reward(ok(runtime_us=1000.0, eager_us=1.0, compile_us=1.0)) == 1.0


def test_binary_incorrect_is_minus_one():
    assert binary_reward(Measurement(compiled=True, correct=False)) == -1.0


def test_binary_violation_is_minus_one():
    assert binary_reward(ok(violations=["timing_tamper"])) == -1.0


# --- continuous_reward -------------------------------------------------------------------------

def test_continuous_is_compile_over_runtime():
    assert continuous_reward(ok(runtime_us=120.0, eager_us=999.0, compile_us=300.0)) == pytest.approx(2.5)


def test_continuous_below_one_when_slower_than_compile():
    assert continuous_reward(ok(runtime_us=400.0, eager_us=50.0, compile_us=100.0)) == pytest.approx(0.25)


def test_continuous_falls_back_to_eager_without_compile_time():
    assert continuous_reward(ok(runtime_us=100.0, eager_us=150.0, compile_us=None)) == pytest.approx(1.5)


def test_continuous_without_any_baseline_is_minus_one():
    assert continuous_reward(ok(runtime_us=100.0)) == -1.0


def test_continuous_without_runtime_is_minus_one():
    assert continuous_reward(ok(runtime_us=None, eager_us=100.0, compile_us=100.0)) == -1.0


def test_continuous_incorrect_is_minus_one():
    m = Measurement(compiled=True, correct=False, runtime_us=1.0, eager_us=100.0, compile_us=100.0)
    assert continuous_reward(m) == -1.0


# --- reward_fn ---------------------------------------------------------------------------------

def test_reward_fn_returns_named_functions():
    assert reward_fn("graduated") is graduated_reward
    assert reward_fn("binary") is binary_reward
    assert reward_fn("continuous") is continuous_reward
    assert set(REWARDS) == {"graduated", "binary", "continuous"}


def test_reward_fn_unknown_name_raises_value_error():
    with pytest.raises(ValueError, match="nope"):
        reward_fn("nope")
