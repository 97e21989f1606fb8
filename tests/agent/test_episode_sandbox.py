"""A scripted policy solves relu_add through the real tools and the real sandbox: a broken
kernel, the compiler's error fed back, a fix, a pass, a profile, finish. The binding file is the
bundled example's, byte for byte, so its torch-header object is built once per cache."""
import asyncio
import json

from src.agent import AgentConfig, ScriptedPolicy, TrajectoryWriter, read_trajectories, render_transcript, run_episode


def call(name, **arguments):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def test_scripted_agent_fixes_a_compile_error_and_passes(small_task, agent_pool, chat_tokenizer, example_paths,
                                                         tmp_path):
    example = example_paths.cpu_solutions / "relu_add_workspace"
    kernel = (example / "kernels" / "relu_add.cpp").read_text()
    broken = kernel.replace("out[i] = v > 0.0f ? v : 0.0f;", "out[i] = v > 0.0f ? v : 0.0f")  # missing ';'
    replies = [
        "Let me read the task.\n" + call("read_file", path="model.py"),
        call("write_file", path="kernels/relu_add.cpp", content=broken)
        + call("write_file", path="kernels/relu_add_binding.cpp",
               content=(example / "kernels" / "relu_add_binding.cpp").read_text())
        + call("write_file", path="model_new.py", content=(example / "model_new.py").read_text())
        + call("compile"),
        "The compiler wants a semicolon.\n"
        + call("edit_file", path="kernels/relu_add.cpp", old_text="? v : 0.0f\n", new_text="? v : 0.0f;\n")
        + call("verify"),
        call("profile"),
        call("finish"),
    ]
    traj = asyncio.run(run_episode(small_task, ScriptedPolicy(replies, tokenizer=chat_tokenizer), agent_pool,
                                   AgentConfig(), backend="cpu", reward="graduated"))
    assert traj.stop_reason == "finish", traj.stop_detail
    results = {(t.index, c.name): c.result for t in traj.turns for c in t.tool_calls}
    assert "N = 4099" in results[(0, "read_file")]
    assert results[(1, "compile")].startswith("compile failed (compile_error)")
    assert "relu_add.cpp" in results[(1, "compile")]
    assert "verify passed: 5/5 input sets match" in results[(2, "verify")]  # verify-only: no timing
    assert "runtime:" in results[(3, "profile")] and "eager PyTorch" in results[(3, "profile")]
    assert traj.invalid_tool_calls == 0
    # Per call: the content it judged (or left) and the verdict in brief, as RFT's filters read them.
    records = {(t.index, c.name): c for t in traj.turns for c in t.tool_calls}
    compiled, verified, profiled = records[(1, "compile")], records[(2, "verify")], records[(3, "profile")]
    assert compiled.verdict == {"status": "compile_error", "stopped_after": "build", "reward": -1.0, "cached": False}
    assert verified.verdict["status"] == "ok" and verified.verdict["stopped_after"] == "verify"
    assert profiled.verdict["stopped_after"] == "timing" and profiled.verdict["reward"] == traj.reward
    assert not verified.verdict["cached"] and not profiled.verdict["cached"]
    assert compiled.content_key == records[(1, "write_file")].content_key != verified.content_key
    assert verified.content_key == profiled.content_key == records[(2, "edit_file")].content_key
    assert records[(0, "read_file")].verdict is None
    # compile: a build-only evaluation (no reference, no GPU lane); verify: no timing; profile: the
    # full verdict, which the final outcome reuses (same content).
    assert traj.timings["sandbox_evaluations"] == 3
    assert "sandbox_timing_s" in traj.timings and traj.final_measurement["stopped_after"] == "timing"
    assert traj.final_measurement["correct"] and traj.reward >= 1.0 and traj.reward_source == "final"
    assert traj.best_reward == traj.reward and "kernels/relu_add.cpp" in traj.best_solution

    out = tmp_path / "trajectories.jsonl"
    TrajectoryWriter(out).append(traj)
    TrajectoryWriter(out).append(traj)
    rows = read_trajectories(out)
    assert len(rows) == 2 and rows[0]["token_ids"] == traj.ledger.token_ids
    assert sum(rows[0]["loss_mask"]) == sum(t.gen_span[1] - t.gen_span[0] for t in traj.turns)
    transcript = render_transcript(rows[0])
    assert "## Turn 1" in transcript and "compile failed" in transcript
