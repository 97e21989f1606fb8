"""eval.py with a generating policy: policy=api runs the agent loop against a real HTTP server on
localhost (scripted replies), keeps the trajectory and transcript, and judges the episode's best
correct solution like any other; the reward group (here reward=binary) is the one the episode
scores its verdicts with."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RELU = REPO / "examples" / "kernelbench_sample_solutions" / "cpu" / "level1" / "1_ReLU"
CHEAP = ("sandbox=cpu", "sandbox.timing.warmup=1", "sandbox.timing.warmup_ms=0", "sandbox.timing.repeats=3",
         "sandbox.num_correct_trials=2", "sandbox.post_timing_trials=1", "sandbox.compile_baseline=false",
         "progress=false")

_spec = importlib.util.spec_from_file_location(
    "openai_client_test_helpers", REPO / "tests" / "llm" / "test_openai_client.py")
helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(helpers)


def call(name: str, **arguments) -> tuple[int, dict]:
    text = "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"
    return 200, helpers.completion(text)


def test_api_policy_episodes_become_judged_solutions(tmp_path, cli_env, sandbox_cache):
    files = {p.relative_to(RELU).as_posix(): p.read_text() for p in sorted(RELU.rglob("*")) if p.is_file()}
    script = [call("write_file", path=rel, content=text) for rel, text in files.items()]
    script += [call("verify"), call("finish")]
    server = helpers.Server(script)
    out_dir = tmp_path / "agent-run"
    try:
        proc = subprocess.run(
            [sys.executable, "eval.py", *CHEAP, "policy=api", f"policy.base_url={server.url}", "policy.model=scripted",
             "policy.api_key_env=", "benchmark.levels=[1]", "benchmark.problem_ids=[1]", f"output_dir={out_dir}",
             f"sandbox.cache_dir={sandbox_cache}", "agent.max_turns=10", "reward=binary"],
            cwd=REPO, env=cli_env, capture_output=True, text=True, timeout=600)
    finally:
        server.close()
    assert proc.returncode == 0, proc.stderr[-4000:]
    episodes = [json.loads(line) for line in (out_dir / "trajectories.jsonl").read_text().splitlines()]
    assert len(episodes) == 1 and episodes[0]["stop_reason"] == "finish"
    # The correct solution scores binary's 1 on every verdict, whatever its speed (graduated: 1 to 3).
    assert episodes[0]["reward_name"] == "binary" and episodes[0]["reward"] == episodes[0]["best_reward"] == 1.0
    verify = next(c for t in episodes[0]["turns"] for c in t["tool_calls"] if c["name"] == "verify")
    assert verify["verdict"]["reward"] == 1.0
    assert episodes[0]["best_solution"]["model_new.py"] == files["model_new.py"]
    rows = [json.loads(line) for line in (out_dir / "results.jsonl").read_text().splitlines()]
    assert [(r["level"], r["problem_id"], r["correct"]) for r in rows] == [(1, 1, True)]
    assert (out_dir / "agent_solutions" / "level1" / "1" / "kernels" / "relu.cpp").read_text() == files["kernels/relu.cpp"]
    assert list((out_dir / "transcripts").glob("*.md"))
    assert json.loads((out_dir / "run.json").read_text())["solutions"] == "policy=api model=scripted agent=multi_turn"
