"""Rewards: pure functions of a Measurement (the sandbox itself knows nothing of RL).

``graduated`` is CUDA Agent's Eq. 1; ``continuous`` is its "w/o robust reward" ablation;
``binary`` rewards correctness alone. Selected by name (``conf/reward/*.yaml``).
"""
from __future__ import annotations

from typing import Callable, Optional

from .measurement import Measurement

# A speedup only counts when the runtime drops by strictly more than this fraction.
SPEEDUP_MARGIN = 0.05


def meaningfully_faster(runtime_us: Optional[float], baseline_us: Optional[float],
                        margin: float = SPEEDUP_MARGIN) -> bool:
    """The paper's b(t, t0): (t0 - t) / t0 > margin. Missing numbers never count as faster."""
    if runtime_us is None or baseline_us is None or baseline_us <= 0:
        return False
    return (baseline_us - runtime_us) / baseline_us > margin


def passed(m: Measurement) -> bool:
    """Correct, compiled, and no guard violations: the precondition of every positive reward."""
    return m.compiled and m.correct and not m.violations and m.error is None


def graduated_reward(m: Measurement, margin: float = SPEEDUP_MARGIN) -> float:
    """-1 failed; 3 faster than eager and compile; 2 faster than eager only; 1 otherwise."""
    if not passed(m):
        return -1.0
    beats_eager = meaningfully_faster(m.runtime_us, m.eager_us, margin)
    beats_compile = meaningfully_faster(m.runtime_us, m.compile_us, margin)
    if beats_eager and beats_compile:
        return 3.0
    if beats_eager:
        return 2.0
    return 1.0


def binary_reward(m: Measurement) -> float:
    """1 for a correct solution, -1 otherwise; speed plays no part."""
    return 1.0 if passed(m) else -1.0


def continuous_reward(m: Measurement) -> float:
    """t_compile / t for a correct solution (t_eager / t when compile has no time), else -1."""
    if not passed(m) or not m.runtime_us:
        return -1.0
    baseline = m.compile_us if m.compile_us is not None else m.eager_us
    if baseline is None:
        return -1.0
    return baseline / m.runtime_us


REWARDS: dict[str, Callable[[Measurement], float]] = {
    "graduated": graduated_reward,
    "binary": binary_reward,
    "continuous": continuous_reward,
}


def reward_fn(name: str) -> Callable[[Measurement], float]:
    try:
        return REWARDS[name]
    except KeyError:
        raise ValueError(f"unknown reward {name!r}; choose from {sorted(REWARDS)}") from None


def result_record(m: Measurement, reward_name: str) -> dict:
    """The measurement with its reward: what evaluate --json prints and evaluate-batch writes."""
    record = m.to_dict()
    record["reward"] = reward_fn(reward_name)(m)
    record["reward_name"] = reward_name
    return record
