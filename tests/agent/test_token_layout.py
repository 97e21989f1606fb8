"""Token-in / token-out: a row's ids are the prompt, the sampled ids as they are, and the chat
template's rendering of what follows each reply on its own, whatever the template does to earlier
turns when it re-renders a history. Real episodes (real workspace and pool), scripted replies."""
import asyncio
import json

import pytest

from src.agent import AgentConfig, ScriptedPolicy, run_episode, run_episodes
from src.agent.tools import tool_schemas
from src.agent.trajectory import ChatRenderer, TemplateDrift, render_ids

# Like Qwen3's template: earlier assistant turns lose their <think>...</think> reasoning when a
# history is rendered; only the last one keeps it.
DROPS_PAST_REASONING = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'tool' -%}"
    "{{ '<|im_start|>user' + nl + '<tool_response>' + nl + m.content + nl + '</tool_response><|im_end|>' + nl }}"
    "{%- elif m.role == 'assistant' -%}"
    "{%- set content = m.content -%}"
    "{%- if not loop.last and '</think>' in content -%}{%- set content = content.split('</think>')[-1] -%}{%- endif -%}"
    "{{ '<|im_start|>assistant' + nl + content + '<|im_end|>' + nl }}"
    "{%- else -%}"
    "{{ '<|im_start|>' + m.role + nl + m.content + '<|im_end|>' + nl }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant' + nl }}{%- endif -%}"
)
# A template that rewrites what the assistant said: no continuation can be rendered on its own.
REWRITES_REPLIES = DROPS_PAST_REASONING.replace("nl + content +", "nl + (content | upper) +")

LIST = '<tool_call>{"name": "list_files", "arguments": {}}</tool_call>'
FINISH = '<tool_call>{"name": "finish", "arguments": {}}</tool_call>'
TOOLS = tool_schemas(list(AgentConfig().tools))


def episode(task, policy, pool, **cfg):
    return asyncio.run(run_episode(task, policy, pool, AgentConfig(**cfg), backend="cpu", reward="graduated"))


def test_continuations_are_the_template_closing_and_new_messages_alone(chat_tokenizer):
    renderer = ChatRenderer(chat_tokenizer, TOOLS)
    eos = chat_tokenizer.eos_token_id
    assert renderer.closing == chat_tokenizer.encode("<|im_end|>\n")
    reply = chat_tokenizer.encode("ok") + [eos]
    assert renderer.continuation(reply, True, []) == chat_tokenizer.encode("\n")  # the sampled eos is not repeated
    cut = chat_tokenizer.encode("o")
    assert renderer.continuation(cut, False, []) == chat_tokenizer.encode("<|im_end|>\n")
    tool = [{"role": "tool", "content": "[list_files] model.py"}]
    assert renderer.continuation(reply, True, tool) == chat_tokenizer.encode(
        "\n<|im_start|>user\n<tool_response>\n[list_files] model.py\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n")


def test_a_template_that_drops_past_reasoning_does_not_drift(small_task, agent_pool, ascii_tokenizer_with):
    tokenizer = ascii_tokenizer_with(DROPS_PAST_REASONING)
    replies = ["<think>look first</think>" + LIST, "<think>done</think>" + FINISH]
    traj = episode(small_task, ScriptedPolicy(replies, tokenizer=tokenizer), agent_pool)
    assert traj.stop_reason == "finish", traj.stop_detail
    eos, observation = tokenizer.eos_token_id, traj.messages[3]["content"]
    expected = (render_ids(tokenizer, traj.messages[:2], TOOLS, True)
                + tokenizer.encode(replies[0]) + [eos]
                + tokenizer.encode(f"\n<|im_start|>user\n<tool_response>\n{observation}\n</tool_response><|im_end|>\n"
                                   "<|im_start|>assistant\n")
                + tokenizer.encode(replies[1]) + [eos] + tokenizer.encode("\n"))
    assert traj.ledger.token_ids == expected
    # Re-rendering the history drops the first turn's reasoning: a prefix check would have drifted.
    assert render_ids(tokenizer, traj.messages, TOOLS, False) != expected
    generated = [i for t in traj.turns for i in range(*t.gen_span)]
    assert [i for i, m in enumerate(traj.ledger.loss_mask) if m] == generated
    assert tokenizer.decode(traj.ledger.token_ids[slice(*traj.turns[0].gen_span)]) == replies[0] + "<|im_end|>"


def test_a_template_that_rewrites_replies_fails_at_episode_start(small_task, agent_pool, ascii_tokenizer_with):
    tokenizer = ascii_tokenizer_with(REWRITES_REPLIES)
    policy = ScriptedPolicy([LIST, FINISH], tokenizer=tokenizer)
    with pytest.raises(TemplateDrift, match="does not keep an assistant reply's tokens apart"):
        asyncio.run(run_episodes([small_task], policy, agent_pool, AgentConfig(), "cpu", reward="graduated"))
    traj = episode(small_task, policy, agent_pool)
    assert traj.stop_reason == "template_drift" and traj.turns == [] and policy.calls == 0
    assert "apart" in traj.stop_detail


def test_trajectory_rows_serialise_the_new_fields(small_task, agent_pool, chat_tokenizer):
    traj = episode(small_task, ScriptedPolicy([LIST, FINISH], tokenizer=chat_tokenizer), agent_pool)
    row = json.loads(json.dumps(traj.to_row()))
    assert row["reward_name"] == "graduated" and row["sampling"] is None and row["policy_version"] is None
    assert row["turns"][0]["tool_calls"][0]["content_key"] and row["turns"][0]["tool_calls"][0]["verdict"] is None
