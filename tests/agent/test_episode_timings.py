"""Sandbox stage seconds in a trajectory's timings count every evaluation that ran, also those
whose verdict a deeper one on the same files replaced in the judge's cache (compile -> verify ->
profile judges one content three times, ever deeper)."""
import asyncio
import json

import pytest

from sandbox.measurement import Measurement
from sandbox.pool import EvalResult
from src.agent import AgentConfig, ScriptedPolicy, run_episode

# Made-up stage seconds of one evaluation at each depth, distinct so that sums identify them.
STAGES = {"build": {"build": 1.0},
          "verify": {"build": 0.0, "reference": 2.0, "verify": 4.0},
          "timing": {"build": 0.0, "reference": 8.0, "baselines": 16.0, "verify": 32.0, "timing": 64.0}}


class FakePool:
    """Answers like the sandbox pool with a correct verdict, without running anything."""

    def __init__(self):
        self.requests = []

    async def evaluate(self, request):
        self.requests.append(request.stop_after)
        m = Measurement(compiled=True, correct=request.stop_after != "build", stopped_after=request.stop_after,
                        stage_seconds=dict(STAGES[request.stop_after]), runtime_us=1.0, eager_us=2.0)
        return EvalResult(request.id, measurement=m)


def call(name, **arguments):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def test_stage_seconds_sum_over_every_evaluation(small_task):
    replies = [call("write_file", path="model_new.py", content="class ModelNew: pass\n"),
               call("compile"), call("verify"), call("profile"), call("finish")]
    pool = FakePool()
    traj = asyncio.run(run_episode(small_task, ScriptedPolicy(replies), pool, AgentConfig(), backend="cpu",
                                   reward="graduated"))
    assert traj.stop_reason == "finish" and pool.requests == ["build", "verify", "timing"]
    timings = traj.timings
    assert timings["sandbox_evaluations"] == 3  # the final outcome reused the profile verdict
    assert timings["sandbox_build_s"] == 1.0
    assert timings["sandbox_reference_s"] == 2.0 + 8.0
    assert timings["sandbox_verify_s"] == 4.0 + 32.0
    assert (timings["sandbox_baselines_s"], timings["sandbox_timing_s"]) == (16.0, 64.0)


def test_a_verdict_answered_from_the_cache_says_so(small_task):
    replies = [call("write_file", path="model_new.py", content="class ModelNew: pass\n"),
               call("profile"), call("verify"), call("finish")]
    traj = asyncio.run(run_episode(small_task, ScriptedPolicy(replies), FakePool(), AgentConfig(), backend="cpu",
                                   reward="graduated"))
    profiled, verified = traj.turns[1].tool_calls[0], traj.turns[2].tool_calls[0]
    assert profiled.verdict == {"status": "ok", "stopped_after": "timing", "reward": 2.0, "cached": False}
    assert verified.verdict == {"status": "ok", "stopped_after": "timing", "reward": 2.0, "cached": True}
    assert profiled.content_key == verified.content_key == traj.turns[0].tool_calls[0].content_key


@pytest.mark.parametrize("reward, expected", [("graduated", 2.0), ("binary", 1.0)])
def test_the_callers_reward_scores_every_verdict(small_task, reward, expected):
    """Runtime 1 us vs eager 2 us: graduated gives 2 (faster than eager), binary 1 (correct)."""
    replies = [call("write_file", path="model_new.py", content="class ModelNew: pass\n"), call("finish")]
    traj = asyncio.run(run_episode(small_task, ScriptedPolicy(replies), FakePool(), AgentConfig(), backend="cpu",
                                   reward=reward))
    assert (traj.reward, traj.final_reward, traj.reward_name) == (expected, expected, reward)


def test_an_unknown_reward_is_refused_before_the_episode(small_task):
    with pytest.raises(ValueError, match="unknown reward 'speed'"):
        asyncio.run(run_episode(small_task, ScriptedPolicy([]), FakePool(), AgentConfig(), backend="cpu",
                                reward="speed"))
