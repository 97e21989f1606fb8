"""benchmarks/bench_baseline_drift.py: its ratios are per task and per kind, each round times
afresh (never from a cache), and the carried cache is read under the config the rounds use."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_baseline_drift import (carried_times, comparisons, family_rows, main, ratio_summary,  # noqa: E402
                                  sandbox_config, time_round)

from src.agent.teacher import write_tasks  # noqa: E402

CARRIED = {"a": {"eager": 100.0, "compile": 50.0}, "b": {"eager": 10.0, "compile": None},
           "c": {"eager": 20.0, "compile": 40.0}}
ROUND1 = {"a": {"eager": 110.0, "compile": 50.0}, "b": {"eager": 10.2, "compile": 8.0},
          "c": {"eager": 19.0, "compile": 44.0}, "d": {"eager": 1.0, "compile": 1.0}}


def test_ratios_are_taken_per_task_where_both_sides_timed_the_kind():
    eager = ratio_summary(ROUND1, CARRIED, "eager")
    # a 1.10, b 1.02, c 0.95 (d is not in the carried cache): two of three moved by more than 5 %.
    assert eager["n"] == 3 and eager["median"] == pytest.approx(1.02)
    assert eager["p10"] == pytest.approx(0.95) and eager["p90"] == pytest.approx(1.10)
    assert eager["moved_5pct"] == pytest.approx(2 / 3)
    compile_ = ratio_summary(ROUND1, CARRIED, "compile")  # b has no carried compile time
    assert compile_["n"] == 2 and compile_["median"] == pytest.approx(1.05)
    assert ratio_summary(ROUND1, {}, "eager") is None


def test_each_round_is_compared_with_the_carried_cache_and_with_the_first_round():
    round2 = {t: {k: v and v * 2 for k, v in times.items()} for t, times in ROUND1.items()}
    pairs = comparisons([ROUND1, round2], CARRIED)
    assert [p["pair"] for p in pairs] == ["round 1 / carried", "round 2 / carried", "round 2 / round 1"]
    assert pairs[2]["eager"]["median"] == pytest.approx(2.0) and pairs[2]["eager"]["n"] == 4
    assert [p["pair"] for p in comparisons([ROUND1], {})] == []


def test_what_a_round_times_is_found_as_carried_under_the_same_config(tmp_path):
    """One task without the torch.compile baseline, timed into a cache root: read back as a
    carried cache, the same numbers come out (the rounds and the reading share one cache key)."""
    cfg = sandbox_config(4, 0, {"compile_baseline": False})
    tasks = [(spec.id, path) for spec, path in write_tasks(family_rows("heldout", 1), tmp_path / "tasks")]
    timed = time_round(tasks, cfg, 1, tmp_path / "cache")
    (task_id, _), = tasks
    assert timed[task_id]["eager"] > 0 and timed[task_id]["compile"] is None
    assert carried_times(tasks, cfg, tmp_path / "cache") == {task_id: {"eager": timed[task_id]["eager"], "compile": None}}
    assert carried_times(tasks, cfg, tmp_path / "empty") == {}
    with pytest.raises(SystemExit, match="from a cache"):  # a round never reads a cache
        time_round(tasks, cfg, 1, tmp_path / "cache")


def test_a_run_writes_its_rounds_and_the_host_that_timed_them(tmp_path):
    out = tmp_path / "drift.json"
    assert main(["--limit", "1", "--rounds", "2", "--share-inductor", "--set", "compile_baseline=false",
                 "--out", str(out)]) == 0
    run = json.loads(out.read_text())
    assert run["share_inductor"] and len(run["round_seconds"]) == 2
    assert len(run["rounds"]) == 2 and run["carried"] == {} and run["host"]["device"].startswith("cpu:")
    assert [p["pair"] for p in run["summary"]] == ["round 2 / round 1"]


def test_a_carried_folder_without_baselines_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--carried", str(tmp_path), "--limit", "1"])
    assert "no baselines/ folder" in capsys.readouterr().err
