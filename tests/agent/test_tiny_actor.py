"""The embedded default actor (data/models/tiny_actor, made by scripts/make_embedded_actor.py):
loaded offline by path with HFPolicy, greedy, it solves a task it was cloned on through the real
CPU sandbox pool: files written, compiled, verified, profiled, finished, correct. Skipped without
transformers."""
import asyncio
import json
from pathlib import Path

import pytest

from src.agent import AgentConfig, HFPolicy, run_episode

transformers = pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parents[2]
ACTOR = REPO / "data" / "models" / "tiny_actor"
TASK = REPO / "examples" / "kernelbench_sample" / "level2" / "3_Scale_Shift_Tanh.py"


def test_the_committed_actor_is_small_and_says_how_it_was_made():
    files = {p.name: p.stat().st_size for p in ACTOR.iterdir()}
    assert {"model.safetensors", "tokenizer.json", "config.json", "README.md", "build.json"} <= set(files)
    assert sum(files.values()) < 5_000_000
    build = json.loads((ACTOR / "build.json").read_text())
    assert any(c.endswith(TASK.name) for c in build["demonstrations"]["cpu"]["correct"])
    assert build["greedy_episodes"]["cpu"]["final_correct"] >= 1


def test_the_actor_solves_a_task_it_was_cloned_on_greedy(agent_pool):
    policy = HFPolicy(str(ACTOR), device="cpu", temperature=0.0)
    cfg = AgentConfig(max_turns=10, max_new_tokens_per_turn=1024)
    traj = asyncio.run(run_episode(TASK, policy, agent_pool, cfg, backend="cpu", reward="graduated"))
    calls = [c.name for t in traj.turns for c in t.tool_calls]
    assert traj.stop_reason == "finish", (traj.stop_reason, traj.stop_detail, calls)
    assert calls[-4:] == ["compile", "verify", "profile", "finish"] and traj.invalid_tool_calls == 0
    assert traj.final_measurement["correct"] and traj.reward >= 1.0
