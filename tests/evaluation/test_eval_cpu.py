"""eval.py end to end on the cpu backend: the sample benchmark, replayed solutions, every metric.

The CPU replay set (examples/kernelbench_sample_solutions/cpu) is built to exercise each verdict:
three correct C++ kernels (one plain, one clearly faster than eager, one ~100x slower on purpose),
one wrong kernel, two hacks the guards catch (PyTorch doing the work; a kernel writing into its
input), one file without ModelNew and one problem with no solution. The five workspaces share
one byte-identical binding file, so the session's build cache compiles torch headers once.
Speeds are measured, so speed metrics are checked against the formulas worked out by hand
from each row's own times; verdicts, counts and rates that do not depend on speed are exact.
"""
from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.measurement import Measurement

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "kernelbench_sample"
CPU_SOLUTIONS = REPO / "examples" / "kernelbench_sample_solutions" / "cpu"
EVAL_TIMEOUT_S = 600
# Cheap and quick: the tests check verdicts and arithmetic, not the precision of timings.
# torch.compile is timed only where its metrics are under test (a cold inductor build costs ~20 s
# per task on a small CPU machine).
CHEAP = ("sandbox=cpu", "sandbox.timing.warmup=1", "sandbox.timing.warmup_ms=0", "sandbox.timing.repeats=3",
         "sandbox.num_correct_trials=2", "sandbox.post_timing_trials=1", "sandbox.compile_baseline=false",
         "progress=false")

# (level, problem id) -> (passed, error, violation kinds)
EXPECTED = {
    (1, 1): (True, None, set()),
    (1, 2): (False, "mismatch", set()),
    (1, 3): (False, "violation", {"torch_op"}),
    (2, 1): (False, "violation", {"input_mutation"}),
    (2, 2): (True, None, set()),
    (2, 3): (True, None, set()),
    (3, 1): (False, "missing_solution", set()),
    (3, 2): (False, "invalid_solution", set()),
}


def run_eval(env: dict, *overrides: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "eval.py", *overrides]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=EVAL_TIMEOUT_S)


def read_rows(out_dir: Path) -> dict[tuple[int, int], dict]:
    lines = (out_dir / "results.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    keyed = {(r["level"], r["problem_id"]): r for r in rows}
    assert len(keyed) == len(rows), "a task appears twice in results.jsonl"
    return keyed


def faster(row: dict, baseline: str) -> bool:
    t, t0 = row["runtime_us"], row[f"{baseline}_us"]
    return t is not None and t0 is not None and (t0 - t) / t0 > 0.05


def geomean(values: list[float]):
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory, cli_env, sandbox_cache):
    out_dir = tmp_path_factory.mktemp("eval") / "cpu-run"
    proc = run_eval(cli_env, *CHEAP, f"policy.solutions={CPU_SOLUTIONS}", f"output_dir={out_dir}",
                    f"sandbox.cache_dir={sandbox_cache}", "workers=2")
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((out_dir / "summary.json").read_text())
    return out_dir, read_rows(out_dir), summary["levels"], proc


def test_every_task_has_one_row_with_every_evaluate_field(cpu_run):
    _, rows, _, _ = cpu_run
    assert set(rows) == set(EXPECTED)
    for row in rows.values():
        assert set(Measurement().to_dict()) | {"level", "problem_id", "name", "reward", "reward_name",
                                              "task_error", "task", "solution"} <= set(row)
    assert rows[2, 2]["name"] == "Residual_ReLU_Chain"


@pytest.mark.parametrize("key", sorted(EXPECTED), ids=lambda k: f"level{k[0]}-{k[1]}")
def test_verdict_of_each_replayed_solution(cpu_run, key):
    row = cpu_run[1][key]
    passed, error, kinds = EXPECTED[key]
    assert (row["correct"], row["error"]) == (passed, error), row["error_detail"]
    assert {v.split(":")[0] for v in row["violations"]} == kinds
    assert (row["reward"] > 0) == passed


def test_the_designed_speeds_hold(cpu_run):
    rows = cpu_run[1]
    assert faster(rows[2, 2], "eager"), rows[2, 2]        # one fused pass vs 48 eager operators
    assert rows[2, 3]["speedup_vs_eager"] < 1.0, rows[2, 3]  # 20 scalar passes on purpose
    assert (rows[2, 2]["reward"], rows[2, 3]["reward"]) == (2.0, 1.0)  # no compile baseline: never 3


def test_pass_rates_and_failure_counts(cpu_run):
    levels = cpu_run[2]
    assert [levels[name]["pass_rate"] for name in ("level1", "level2", "level3", "overall")] == \
           [1 / 3, 2 / 3, 0.0, 3 / 8]
    assert levels["overall"]["violations"] == {"input_mutation": 1, "torch_op": 1}
    assert levels["overall"]["errors"] == {"invalid_solution": 1, "mismatch": 1, "missing_solution": 1,
                                           "violation": 2}
    assert levels["level3"]["errors"] == {"invalid_solution": 1, "missing_solution": 1}


def test_speed_metrics_match_the_hand_formulas(cpu_run):
    rows, levels = cpu_run[1], cpu_run[2]
    groups = {"level1": [(1, 1), (1, 2), (1, 3)], "level2": [(2, 1), (2, 2), (2, 3)],
              "level3": [(3, 1), (3, 2)], "overall": sorted(EXPECTED)}
    for name, keys in groups.items():
        passed = [rows[k] for k in keys if EXPECTED[k][0]]
        eager_speedups = [r["eager_us"] / r["runtime_us"] for r in passed]
        summary = levels[name]
        assert summary["faster_than_eager_rate"] == sum(faster(r, "eager") for r in passed) / len(keys)
        assert summary["geomean_speedup_vs_eager"] == pytest.approx(geomean(eager_speedups), rel=1e-12)
        for p in (0, 1, 1.5, 2):
            assert summary["fast_p"][f"fast_{p:g}"] == sum(s > p for s in eager_speedups) / len(keys), (name, p)
        assert summary["fast_p"]["fast_0"] == summary["pass_rate"]
    assert levels["level2"]["faster_than_eager_rate"] == 1 / 3  # the fused chain, not the slow one


def test_compile_metrics_are_not_applicable_without_the_compile_baseline(cpu_run):
    levels = cpu_run[2]
    for name in ("level1", "level2", "overall"):
        assert levels[name]["faster_than_compile_rate"] is None
        assert levels[name]["geomean_speedup_vs_compile"] is None
    assert levels["level3"]["faster_than_compile_rate"] == 0.0  # nothing passed there at all


def test_reports_are_written(cpu_run):
    out_dir, _, _, proc = cpu_run
    for name in ("summary.md", "fast_p.png", "speedups.png", "run.json", ".hydra/config.yaml"):
        assert (out_dir / name).is_file(), name
    assert "| overall | 8 | 37.5% |" in proc.stdout
    assert proc.stdout == (out_dir / "summary.md").read_text() + "\n"  # only the summary: the log is on stderr


def test_resume_judges_only_the_tasks_not_yet_recorded(cpu_run, cli_env, sandbox_cache, tmp_path):
    out_dir, rows, _, _ = cpu_run
    resumed = tmp_path / "resumed"
    shutil.copytree(out_dir, resumed)
    lines = (resumed / "results.jsonl").read_text().splitlines()
    dropped = {(1, 2), (3, 1), (3, 2)}
    kept = [line for line in lines if (json.loads(line)["level"], json.loads(line)["problem_id"]) not in dropped]
    (resumed / "results.jsonl").write_text("\n".join(kept) + "\n")
    proc = run_eval(cli_env, *CHEAP, f"policy.solutions={CPU_SOLUTIONS}", f"output_dir={resumed}",
                    f"sandbox.cache_dir={sandbox_cache}", "workers=2", "plots=false")
    assert proc.returncode == 0, proc.stderr[-4000:]
    after = (resumed / "results.jsonl").read_text().splitlines()
    assert after[:len(kept)] == kept  # untouched, not re-judged
    again = read_rows(resumed)
    assert set(again) == set(EXPECTED)
    for key in dropped:
        assert (again[key]["correct"], again[key]["error"]) == (False, EXPECTED[key][1]), \
            (again[key].get("error_detail"), again[key].get("violations"))
    assert "5 already in" in (resumed / "eval.log").read_text()


def test_jsonl_replay_with_compile_baseline_and_a_broken_task(cli_env, sandbox_cache, tmp_path):
    """Guards off (so a plain PyTorch ModelNew counts as correct), torch.compile timed: the
    compile metrics end to end; a task whose inputs cannot be made is a task error, not a crash."""
    bench = tmp_path / "bench"
    (bench / "level1").mkdir(parents=True)
    shutil.copy(SAMPLE / "level1" / "1_ReLU.py", bench / "level1" / "1_ReLU.py")
    shutil.copy(SAMPLE / "level1" / "2_Leaky_ReLU.py", bench / "level1" / "3_Leaky_ReLU.py")
    broken = (SAMPLE / "level1" / "1_ReLU.py").read_text().replace(
        "return [torch.randn(ROWS, COLS)]", 'raise RuntimeError("inputs unavailable")')
    (bench / "level1" / "2_Broken_Inputs.py").write_text(broken)
    code = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
            "    def forward(self, x):\n        return torch.relu(x)\n")
    source = tmp_path / "kernels.jsonl"
    source.write_text("".join(json.dumps({"level_id": 1, "task_id": t, "code": code}) + "\n" for t in (1, 2, 9)))
    out_dir = tmp_path / "jsonl-run"
    proc = run_eval(cli_env, *CHEAP, f"benchmark.root={bench}", "benchmark.levels=[1]",
                    f"policy.solutions={source}", f"output_dir={out_dir}", f"sandbox.cache_dir={sandbox_cache}",
                    "sandbox.guards=false", "sandbox.compile_baseline=true", "plots=false")
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = read_rows(out_dir)
    assert set(rows) == {(1, 1), (1, 2), (1, 3)}
    relu, broken_row, unsolved = rows[1, 1], rows[1, 2], rows[1, 3]
    assert relu["correct"] and relu["compile_us"] > 0, relu["error_detail"]
    # torch.compile's own precompiled headers went to the cache every reference worker shares.
    assert any((sandbox_cache / "inductor" / "precompiled_headers").glob("*.h*"))
    assert broken_row["error"] == "task_error" and "inputs unavailable" in broken_row["task_error"]
    assert unsolved["error"] == "missing_solution"
    assert Path(relu["solution"]) == out_dir / "replay_solutions" / "level1" / "1.py"
    overall = json.loads((out_dir / "summary.json").read_text())["levels"]["overall"]
    speedup = relu["compile_us"] / relu["runtime_us"]
    assert overall["pass_rate"] == 1 / 3
    assert overall["faster_than_compile_rate"] == (1 / 3 if faster(relu, "compile") else 0.0)
    assert overall["geomean_speedup_vs_compile"] == pytest.approx(speedup, rel=1e-12)
    assert overall["fast_p_vs_compile"]["fast_1"] == (1 / 3 if speedup > 1 else 0.0)
    assert overall["errors"] == {"missing_solution": 1, "task_error": 1}


@pytest.mark.parametrize("case", ["wrong root", "no solutions"])
def test_unusable_input_is_one_clear_line(cli_env, tmp_path, case):
    wrong_root = tmp_path / "KernelBench"
    overrides, expected = {
        "wrong root": ([f"benchmark.root={wrong_root}", f"policy.solutions={CPU_SOLUTIONS}"],
                       f"error: benchmark root {wrong_root} is not a directory (expected a folder holding "
                       "level1/, level2/, ... with {id}_{name}.py problem files)"),
        "no solutions": ([], "error: policy.solutions must be set, e.g. policy.solutions=PATH on the command line"),
    }[case]
    proc = run_eval(cli_env, "sandbox=cpu", f"output_dir={tmp_path / 'out'}", *overrides)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == expected
