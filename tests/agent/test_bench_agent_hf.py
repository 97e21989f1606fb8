"""benchmarks/bench_agent_hf.py end to end at CPU scale: tokenizer, scripted demonstrations
through the real pool, behaviour cloning of a tiny Llama, save_pretrained, HFPolicy loading it by
path, one measured episode through the pool, and the report. Skipped without transformers."""
import importlib.util
import json

import pytest

from src.agent import AgentConfig, read_trajectories
from src.agent.tools import tool_schemas

transformers = pytest.importorskip("transformers")


def load_bench(root):
    spec = importlib.util.spec_from_file_location("bench_agent_hf", root / "benchmarks" / "bench_agent_hf.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # a benchmark script end to end (minutes); token-in/token-out is also tests/agent/test_token_layout.py
def test_benchmark_runs_trained_episodes_through_the_sandbox(example_paths, sandbox_cache, tmp_path):
    bench = load_bench(example_paths.root)
    out_dir, report_path = tmp_path / "policy", tmp_path / "report.json"
    # ~70 steps reach the target; from there the replayed steps up to profile are reliable.
    report = bench.main(["--backend", "cpu", "--tasks", "level1/1", "--demos-per-task", "1",
                         "--model-size", "tiny", "--vocab-size", "1024", "--train-steps", "150", "--lr", "2e-2",
                         "--target-loss", "0.01", "--episodes", "1", "--concurrency", "1", "--max-turns", "8",
                         "--max-new-tokens", "1024", "--quick-sandbox", "--cache-dir", str(sandbox_cache),
                         "--output-dir", str(out_dir), "--out", str(report_path), "--no-progress", "--seed", "0"])
    assert json.loads(report_path.read_text()) == json.loads(json.dumps(report))
    demos, training = report["demonstrations"], report["training"]
    assert demos["episodes"] == demos["correct"] == 1 and demos["used"] == ["level1/1"]
    assert training["final_loss"] < 0.01 < training["first_loss"] and training["steps"] <= 150
    # Saved like any HF model; the measured episode's policy was loaded from that path.
    assert {"config.json", "tokenizer.json", "generation_config.json"} <= {p.name for p in out_dir.iterdir()}
    assert report["model"]["path"] == str(out_dir) and report["per_episode"][0]["task"] == "1_ReLU.py"

    assert report["episodes"] == len(report["per_episode"]) == 1
    assert report["generated_tokens"] > 0 and report["time_split_s"]["generation"] > 0
    assert report["sandbox_tool_calls"] >= 1 and report["sandbox_evaluations"] >= 1
    assert report["tool_calls"]["write_file"] >= 1
    split = report["time_split_s"]
    assert set(split) == {"generation", "generation_wait", "build", "verify", "timing", "sandbox_overhead", "other"}
    assert all(seconds >= -1e-6 for seconds in split.values()), split
    assert sum(split.values()) == pytest.approx(report["episode_seconds_total"], abs=1e-6)
    assert report["episode_seconds_total"] <= report["wall_s"] + 1e-3  # one episode at a time
    assert report["episodes_per_hour"] == pytest.approx(3600 / report["wall_s"])

    assert len(read_trajectories(out_dir / "demonstrations.jsonl")) == 1
    rows = read_trajectories(out_dir / "trajectories.jsonl")
    assert len(rows) == 1 and rows[0]["has_logprobs"] and rows[0]["num_turns"] == report["turns_per_episode"]
    # Token-in / token-out: no drift, and the ids (the model's own, perhaps split other than the
    # tokenizer would) spell exactly the text the chat template renders for the history.
    assert rows[0]["stop_reason"] != "template_drift", rows[0]["stop_detail"]
    stops = report["outcomes"]["stop_reasons"]
    assert stops == {rows[0]["stop_reason"]: {"episodes": 1, "share": 1.0}}
    assert report["outcomes"]["template_drift_share"] == 0.0
    tokenizer = transformers.AutoTokenizer.from_pretrained(out_dir)
    tools = tool_schemas(list(AgentConfig().tools))
    text = tokenizer.apply_chat_template(rows[0]["messages"], tools=tools, tokenize=False)
    assert tokenizer.decode(rows[0]["token_ids"]) == text
    assert rows[0]["sampling"] == {"temperature": 0.0, "top_p": 1.0, "top_k": 0} and rows[0]["policy_version"] == [0, 0]
