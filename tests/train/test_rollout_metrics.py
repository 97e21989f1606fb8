"""rollout_metrics on hand-made episode rows: the final workspace's verdict (what training's
reward uses) and the best correct one (the paper's evaluation rule), computed by hand."""
from __future__ import annotations

import pytest

from src.data.rollout import rollout_metrics


def measurement(correct: bool, runtime_us: float = 100.0, compile_us: float = 200.0, eager_us: float = 300.0,
                **extra) -> dict:
    return {"compiled": True, "correct": correct, "runtime_us": runtime_us, "compile_us": compile_us,
            "eager_us": eager_us, "violations": [], "error": None, **extra}


def episode(reward: float, final: dict, best: dict | None, best_reward: float | None) -> dict:
    return {"reward": reward, "final_measurement": final, "best_measurement": best, "best_reward": best_reward,
            "turns": [{"tool_calls": [{}], "parse_errors": [], "finish_reason": "stop"}], "num_turns": 1,
            "invalid_tool_calls": 0, "stop_reason": "finish", "num_tokens": 10, "timings": {}, "loss_mask": [1] * 10}


def test_final_and_best_verdicts_are_counted_apart():
    rows = [
        # A correct kernel 2x faster than torch.compile at some turn, then edited into a wrong one.
        episode(-1.0, measurement(False), measurement(True, runtime_us=100.0), 3.0),
        # Correct to the end, but slower than torch.compile (faster than eager by > 5 %).
        episode(2.0, measurement(True, runtime_us=250.0), measurement(True, runtime_us=250.0), 2.0),
        # Never correct: no best state; its best counts the final reward.
        episode(-1.0, measurement(False), None, None),
        # Correct and fast, but flagged by a guard: not a pass, final or best.
        episode(-1.0, measurement(True, violations=["timing_tampered"]), None, None),
    ]
    m = rollout_metrics(rows, rows, 1.0)
    assert m["rollout/reward_mean"] == pytest.approx((-1 + 2 - 1 - 1) / 4)
    assert m["rollout/best_reward_mean"] == pytest.approx((3 + 2 - 1 - 1) / 4)
    assert m["rollout/pass_rate"] == 0.25 and m["rollout/best_pass_rate"] == 0.5
    assert m["rollout/faster_than_eager"] == 0.25 and m["rollout/faster_than_compile"] == 0.0
    assert m["rollout/best_faster_than_compile"] == 0.25


def test_each_rank_gets_an_equal_share_of_held_out_tasks_wrapped_round_as_torchs_sampler_pads():
    from src.stages.common import mean_over_ranks, rank_share

    tasks = ["a", "b", "c", "d", "e"]
    assert [rank_share(tasks, r, 2) for r in (0, 1)] == [["a", "c", "e"], ["b", "d", "a"]]
    assert [rank_share(["a"], r, 3) for r in (0, 1, 2)] == [["a"], ["a"], ["a"]]  # fewer tasks than ranks
    assert rank_share(tasks, 0, 1) == tasks
    assert mean_over_ranks({"val/pass_rate": 0.5}, 1) == {"val/pass_rate": 0.5}  # one rank: no collective


def test_the_graduated_reading_compares_runs_trained_on_other_rewards():
    """Binary-reward episodes (1 correct, -1 not) read by the graduated reward, from the verdict
    each reward came from: 3 (2x faster than compile and eager), 2 (faster than eager only), 1
    (slower than both), -1 (wrong); a best-sourced reward reads the best verdict, not the final."""
    rows = [episode(1.0, measurement(True), measurement(True), 1.0),
            episode(1.0, measurement(True, runtime_us=250.0), None, None),
            episode(1.0, measurement(True, runtime_us=400.0), None, None),
            episode(-1.0, measurement(False), None, None),
            {**episode(1.0, measurement(False), measurement(True), 1.0), "reward_source": "best"}]
    m = rollout_metrics(rows, rows, 1.0)
    assert m["rollout/reward_mean"] == pytest.approx(3 / 5)
    assert m["rollout/graduated_reward_mean"] == pytest.approx((3 + 2 + 1 - 1 + 3) / 5)
    # Under the graduated reward itself the reading is the reward.
    graded = [{**r, "reward": g} for r, g in zip(rows, (3.0, 2.0, 1.0, -1.0, 3.0))]
    graded_metrics = rollout_metrics(graded, graded, 1.0)
    assert graded_metrics["rollout/graduated_reward_mean"] == pytest.approx(graded_metrics["rollout/reward_mean"])
