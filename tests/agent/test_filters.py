"""RFT's exclusion rule (src/agent/filters.py) on hand-built trajectory rows."""
from src.agent.filters import FilterRules, exclusion_reasons, filter_rows, longest_failing_repeat, rejudged_calls


def tool(name, key="k1", ok=True, status=None, **arguments):
    verdict = None if status is None else {"status": status, "stopped_after": "build", "reward": -1.0, "cached": False}
    return {"name": name, "arguments": arguments, "result": "", "ok": ok, "content_key": key, "verdict": verdict}


def row(*turns, reward=1.0, invalid=0, stop="finish"):
    return {"reward": reward, "invalid_tool_calls": invalid, "stop_reason": stop,
            "turns": [{"index": i, "tool_calls": list(calls)} for i, calls in enumerate(turns)]}


# The expert's path: write, compile, verify, profile (each deeper on the same content), finish.
CLEAN = row([tool("write_file", path="model_new.py", content="a")], [tool("compile", status="ok")],
            [tool("verify", status="ok")], [tool("profile", status="ok")], [tool("finish")])


def test_a_clean_rewarded_row_is_kept():
    assert exclusion_reasons(CLEAN) == []
    assert rejudged_calls(CLEAN) == 0 and longest_failing_repeat(CLEAN) == 0


def test_judging_the_same_content_again_at_the_same_or_a_shallower_stage_is_redundant():
    again = row([tool("profile", status="ok")], [tool("verify", status="ok")], [tool("profile", status="ok")])
    assert rejudged_calls(again) == 2  # verify after profile, profile after profile
    assert exclusion_reasons(again) == ["rejudged_content"]
    assert exclusion_reasons(again, FilterRules(max_rejudged=2)) == []
    # New content (an edit that changed the files) is a new question at any stage.
    edited = row([tool("verify", "k1", status="ok")], [tool("edit_file", "k2")], [tool("verify", "k2", status="ok")])
    assert rejudged_calls(edited) == 0


def test_asking_deeper_about_content_that_already_failed_is_redundant():
    failed_build = row([tool("compile", status="compile_error")], [tool("verify", status="compile_error")])
    assert rejudged_calls(failed_build) == 1
    fixed = row([tool("compile", "k1", status="compile_error")], [tool("edit_file", "k2")],
                [tool("verify", "k2", status="ok")])
    assert rejudged_calls(fixed) == 0


def test_the_same_failing_call_repeated_in_a_row():
    edit = dict(path="model_new.py", old_text="x", new_text="y")
    twice = row([tool("edit_file", ok=False, **edit)], [tool("edit_file", ok=False, **edit)])
    assert longest_failing_repeat(twice) == 2 and exclusion_reasons(twice) == ["repeated_failing_call"]
    assert exclusion_reasons(twice, FilterRules(max_failing_repeats=2)) == []
    # Other arguments, or a success in between, break the run.
    other = row([tool("edit_file", ok=False, **edit)], [tool("edit_file", ok=False, **{**edit, "old_text": "z"})])
    broken = row([tool("edit_file", ok=False, **edit)], [tool("list_files")], [tool("edit_file", ok=False, **edit)])
    assert longest_failing_repeat(other) == longest_failing_repeat(broken) == 1
    # A sandbox verdict that is not ok is a failing call too (here on new content each time).
    builds = row([tool("compile", "k1", status="compile_error")], [tool("compile", "k2", status="compile_error")])
    assert longest_failing_repeat(builds) == 2 and rejudged_calls(builds) == 0


def test_invalid_calls_reward_and_stop_reason():
    assert exclusion_reasons(row([tool("finish")], invalid=1)) == ["invalid_tool_calls"]
    assert exclusion_reasons(row([tool("finish")], invalid=1), FilterRules(max_invalid_tool_calls=1)) == []
    assert exclusion_reasons(row([tool("finish")], reward=-1.0)) == ["reward"]
    assert exclusion_reasons(row([tool("finish")], reward=None)) == ["reward"]
    assert exclusion_reasons(row([tool("finish")], reward=-1.0), FilterRules(min_reward=None)) == []
    assert exclusion_reasons(row([tool("finish")], stop="template_drift")) == ["stop_reason"]
    assert exclusion_reasons(row([tool("finish")], stop="max_turns")) == []


def test_filter_rows_counts_rows_per_reason():
    loop = row([tool("verify", status="ok")], [tool("verify", status="ok")], reward=-1.0)
    kept, counts = filter_rows([CLEAN, loop, row([], invalid=3), CLEAN])
    assert kept == [CLEAN, CLEAN]
    assert counts == {"rows": 4, "kept": 2, "excluded": {"stop_reason": 0, "reward": 1, "invalid_tool_calls": 1,
                                                          "rejudged_content": 1, "repeated_failing_call": 0}}


def test_trajectory_objects_are_read_like_rows(small_task, agent_pool, chat_tokenizer):
    """A real episode's Trajectory (not its JSON row) goes through the same rule: verify on a
    workspace without model_new.py fails, and asking again is redundant."""
    import asyncio

    from src.agent import AgentConfig, ScriptedPolicy, run_episode

    verify = '<tool_call>{"name": "verify", "arguments": {}}</tool_call>'
    replies = [verify, verify, '<tool_call>{"name": "finish", "arguments": {}}</tool_call>']
    traj = asyncio.run(run_episode(small_task, ScriptedPolicy(replies, tokenizer=chat_tokenizer), agent_pool,
                                   AgentConfig(), backend="cpu", reward="graduated"))
    first, second = (t.tool_calls[0] for t in traj.turns[:2])
    assert first.verdict["status"] == "invalid_solution" and second.verdict["cached"]
    assert exclusion_reasons(traj) == ["reward", "rejudged_content", "repeated_failing_call"]
