"""benchmarks/bench_agent_hf.py end to end at CPU scale: tokenizer, scripted demonstrations
through the real pool, behaviour cloning of a tiny Llama, save_pretrained, HFPolicy loading it by
path, one measured episode through the pool, and the report. Skipped without transformers."""
import importlib.util
import json

import pytest

from src.agent import AgentConfig, read_trajectories
from src.agent.tools import tool_schemas
from src.agent.trajectory import render_ids

transformers = pytest.importorskip("transformers")


def load_bench(root):
    spec = importlib.util.spec_from_file_location("bench_agent_hf", root / "benchmarks" / "bench_agent_hf.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    if rows[0]["stop_reason"] != "template_drift":  # the model's own ids are what the template renders
        tokenizer = transformers.AutoTokenizer.from_pretrained(out_dir)
        tools = tool_schemas(list(AgentConfig().tools))
        open_turn = rows[0]["messages"][-1]["role"] != "assistant"
        rendered, recorded = render_ids(tokenizer, rows[0]["messages"], tools, open_turn), rows[0]["token_ids"]
        first = next((i for i, (a, b) in enumerate(zip(rendered, recorded)) if a != b), min(len(rendered), len(recorded)))
        assert rendered == recorded, (f"first difference at {first} of {len(recorded)}: rendered "
                                      f"{tokenizer.decode(rendered[first - 20:first + 20])!r} vs recorded "
                                      f"{tokenizer.decode(recorded[first - 20:first + 20])!r}; "
                                      f"stop {rows[0]['stop_reason']}")
