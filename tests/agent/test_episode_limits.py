"""The loop's limits and stop reasons, and the token record's agreement with the chat template.

Scripted policies drive real episodes (real workspace, real pool); none of them writes a
model_new.py, so each final verdict is a quick invalid_solution."""
import asyncio

from src.agent import AgentConfig, ScriptedPolicy, run_episode
from src.agent.trajectory import render_ids

LIST = '<tool_call>{"name": "list_files", "arguments": {}}</tool_call>'
FINISH = '<tool_call>{"name": "finish", "arguments": {}}</tool_call>'


def episode(task, policy, pool, **cfg):
    return asyncio.run(run_episode(task, policy, pool, AgentConfig(**cfg), backend="cpu", reward="graduated"))


def assert_ids_equal_template(traj, tokenizer, tool_names=AgentConfig().tools):
    """The recorded ids are exactly the template's rendering of the message history."""
    tools = [{"type": "function", "function": {"name": n}} for n in tool_names]
    open_turn = traj.messages[-1]["role"] != "assistant"
    expected = render_ids(tokenizer, traj.messages, tools, add_generation_prompt=open_turn)
    # Tool names are all the template uses of the schemas, so names alone render identically.
    assert traj.ledger.token_ids == expected
    assert len(traj.ledger.loss_mask) == len(traj.ledger.logprobs) == len(expected)


def test_finish_ends_the_episode_and_tokens_round_trip(small_task, agent_pool, chat_tokenizer):
    policy = ScriptedPolicy([LIST, "thinking... " + FINISH], tokenizer=chat_tokenizer)
    traj = episode(small_task, policy, agent_pool)
    assert traj.stop_reason == "finish" and len(traj.turns) == 2
    assert_ids_equal_template(traj, chat_tokenizer)
    # loss mask is 1 exactly on the generated spans (reply text + the end-of-turn token).
    generated = [i for t in traj.turns for i in range(*t.gen_span)]
    assert [i for i, m in enumerate(traj.ledger.loss_mask) if m] == generated
    first = traj.turns[0]
    assert chat_tokenizer.decode(traj.ledger.token_ids[slice(*first.gen_span)]) == LIST + "<|im_end|>"
    assert "model.py" in chat_tokenizer.decode(traj.ledger.token_ids[slice(*first.obs_span)])
    assert traj.final_measurement["error"] == "invalid_solution" and traj.reward == -1.0


def test_max_turns(small_task, agent_pool, chat_tokenizer):
    traj = episode(small_task, ScriptedPolicy([LIST] * 5, tokenizer=chat_tokenizer), agent_pool, max_turns=3)
    assert traj.stop_reason == "max_turns" and len(traj.turns) == 3
    assert_ids_equal_template(traj, chat_tokenizer)


def test_context_limit_stops_before_overflowing(small_task, agent_pool, chat_tokenizer):
    policy = ScriptedPolicy([LIST] * 50, tokenizer=chat_tokenizer)
    prompt = episode(small_task, ScriptedPolicy([FINISH], tokenizer=chat_tokenizer), agent_pool).turns[0].gen_span[0]
    traj = episode(small_task, policy, agent_pool, max_context_tokens=prompt + 400)
    assert traj.stop_reason == "context_limit" and 1 <= len(traj.turns) < 50
    assert len(traj.ledger) >= prompt + 400
    assert_ids_equal_template(traj, chat_tokenizer)


def test_new_tokens_per_turn_cut_a_reply(small_task, agent_pool, chat_tokenizer):
    traj = episode(small_task, ScriptedPolicy([LIST, FINISH], tokenizer=chat_tokenizer), agent_pool,
                   max_new_tokens_per_turn=20)
    first = traj.turns[0]
    assert first.finish_reason == "length" and first.gen_span[1] - first.gen_span[0] == 20
    # The cut reply is closed by the template's end-of-turn, which the policy did not sample: mask 0.
    end = first.gen_span[1]
    assert traj.ledger.token_ids[end] == chat_tokenizer.eos_token_id and traj.ledger.loss_mask[end] == 0
    assert first.parse_errors == ["a <tool_call> was not closed with </tool_call> "
                                  "(your reply hit the per-turn token limit)"]
    assert_ids_equal_template(traj, chat_tokenizer)


def test_invalid_calls_are_counted_and_end_the_episode(small_task, agent_pool, chat_tokenizer):
    replies = ["no call here", '<tool_call>{"name": "compile"</tool_call>', '<tool_call>{"name": "rm"}</tool_call>']
    traj = episode(small_task, ScriptedPolicy(replies, tokenizer=chat_tokenizer), agent_pool,
                   max_consecutive_invalid=3)
    assert traj.stop_reason == "invalid_calls" and traj.invalid_tool_calls == 3
    assert "unknown tool 'rm'" in traj.turns[2].tool_calls[0].result
    tool_messages = [m["content"] for m in traj.messages if m["role"] == "tool"]
    assert any("no tool call found" in m for m in tool_messages)
    assert any("not valid JSON" in m for m in tool_messages)


def test_policy_failure_is_recorded_not_raised(small_task, agent_pool):
    traj = episode(small_task, ScriptedPolicy([LIST]), agent_pool)  # text-level: no tokenizer
    assert traj.stop_reason == "policy_error" and "no reply left" in traj.stop_detail
    assert traj.ledger.token_ids == [] and traj.reward == -1.0


def test_observations_are_truncated(small_task, agent_pool):
    read = '<tool_call>{"name": "read_file", "arguments": {"path": "SKILL.md"}}</tool_call>'
    traj = episode(small_task, ScriptedPolicy([read, FINISH]), agent_pool, max_observation_chars=300)
    observation = traj.messages[3]["content"]
    assert len(observation) < 400 and "characters cut" in observation


def test_single_turn_mode_takes_one_reply(small_task, agent_pool, chat_tokenizer):
    write = ('<tool_call>{"name": "write_file", "arguments": {"path": "kernels/k.cpp", "content": "int k;"}}'
             '</tool_call>')
    cfg = dict(mode="single_turn", max_turns=1, tools=("write_file",))
    traj = episode(small_task, ScriptedPolicy([write], tokenizer=chat_tokenizer), agent_pool, **cfg)
    assert traj.stop_reason == "single_turn" and len(traj.turns) == 1
    assert traj.turns[0].tool_calls[0].ok
    assert traj.messages[-1]["role"] == "assistant"
    assert_ids_equal_template(traj, chat_tokenizer, ("write_file",))
