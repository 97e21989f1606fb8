"""The API policy in whole episodes against a real HTTP server on localhost (the server and the
completion helper are the LLM client tests' own)."""
import asyncio
import importlib.util
from pathlib import Path

import pytest

from src.agent import AgentConfig, APIPolicy, run_episode

_spec = importlib.util.spec_from_file_location(
    "openai_client_test_helpers", Path(__file__).resolve().parents[1] / "llm" / "test_openai_client.py")
helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(helpers)


@pytest.fixture
def server():
    started = []

    def start(*script):
        started.append(helpers.Server(script))
        return started[-1]

    yield start
    for s in started:
        s.close()


def native_finish():
    body = helpers.completion("")
    body["choices"][0]["message"]["tool_calls"] = [
        {"id": "c1", "type": "function", "function": {"name": "finish", "arguments": "{}"}}]
    return body


def test_api_policy_runs_an_episode_over_http(server, small_task, agent_pool):
    write = ('<tool_call>{"name": "write_file", "arguments": {"path": "kernels/k.cpp", "content": "int k;"}}'
             '</tool_call>')
    srv = server((200, helpers.completion(write)), (200, native_finish()))
    policy = APIPolicy(base_url=srv.url, model="test-model", api_key_env="", sampling={"temperature": 0.2})
    traj = asyncio.run(run_episode(small_task, policy, agent_pool,
                                   AgentConfig(max_new_tokens_per_turn=256), backend="cpu", reward="graduated"))
    assert traj.stop_reason == "finish" and traj.policy == "test-model"
    assert traj.turns[0].tool_calls[0].result == "wrote kernels/k.cpp (1 lines)"
    assert traj.turns[1].tool_calls[0].name == "finish"  # the server's native call, parsed from its text form
    assert traj.ledger.token_ids == [] and not traj.has_logprobs
    first, second = (r["body"] for r in srv.requests)
    assert first["model"] == "test-model" and first["max_tokens"] == 256 and first["temperature"] == 0.2
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert "<tool_call>" in first["messages"][0]["content"] and "model.py" in first["messages"][1]["content"]
    # The tool result went back as a user message the plain chat protocol accepts.
    assert second["messages"][-1] == {"role": "user", "content":
                                      "<tool_response>\n[write_file] wrote kernels/k.cpp (1 lines)\n</tool_response>"}
    assert traj.final_measurement["error"] == "invalid_solution"  # no model_new.py was written


def test_unreachable_api_ends_the_episode_with_policy_error(small_task, agent_pool):
    policy = APIPolicy(base_url="http://127.0.0.1:9/v1", model="m", api_key_env="", max_retries=0, timeout_s=2)
    traj = asyncio.run(run_episode(small_task, policy, agent_pool, AgentConfig(), backend="cpu", reward="graduated"))
    assert traj.stop_reason == "policy_error" and "cannot reach" in traj.stop_detail
    assert traj.turns == [] and traj.reward == -1.0
