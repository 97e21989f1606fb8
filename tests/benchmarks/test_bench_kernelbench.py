"""benchmarks/bench_kernelbench.py and kernelbench_eval.py on CPU: pair selection, the KernelBench-style evaluation's
verdicts, seeds and timing on the cpu device, the loop's process and budget, and the report."""
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]

TASK = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.relu(x) * self.scale

def get_inputs():
    return [torch.randn(16, 33)]

def get_init_inputs():
    return [2.0]
'''
SOLUTION = '''import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return (x.clamp(min=0) * self.scale){tail}
'''


def solution(tail: str = "") -> str:
    return SOLUTION.format(tail=tail)


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_kernelbench", REPO / "benchmarks" / "bench_kernelbench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def tree(tmp_path):
    """A benchmark root with levels 1-2 and a solutions folder for three of its problems."""
    root, sols = tmp_path / "root", tmp_path / "sols"
    for level, pid in ((1, 1), (1, 2), (1, 3), (2, 1), (2, 5)):
        (root / f"level{level}").mkdir(parents=True, exist_ok=True)
        (root / f"level{level}" / f"{pid}_Tiny.py").write_text(TASK)
    for level, pid in ((1, 1), (1, 3), (2, 5)):
        (sols / f"level{level}").mkdir(parents=True, exist_ok=True)
        (sols / f"level{level}" / f"{pid}_Tiny.py").write_text(solution())
    return root, sols


def test_selection_parses_levels_and_ids(bench):
    assert bench.parse_selection("") is None
    assert bench.parse_selection("1/19, 1/23,3") == {1: {19, 23}, 3: None}
    assert bench.parse_selection("2,2/4") == {2: None}  # a whole level stays whole
    with pytest.raises(SystemExit):
        bench.parse_selection("level1/19")


def test_pairs_follow_the_solutions_and_interleave_levels(bench, tree):
    root, sols = tree
    pairs = bench.find_pairs(root, sols)
    assert [p.id for p in pairs] == ["level1/1", "level1/3", "level2/5"]
    assert Path(pairs[1].task).name == "3_Tiny.py" and Path(pairs[1].solution).parent.name == "level1"
    assert [p.id for p in bench.interleave(pairs)] == ["level1/1", "level2/5", "level1/3"]
    assert [p.id for p in bench.find_pairs(root, sols, {1: {3}, 2: None})] == ["level1/3", "level2/5"]
    with pytest.raises(SystemExit):
        bench.find_pairs(root, sols, {3: None})


def test_a_solution_without_its_problem_is_an_error(bench, tree):
    root, sols = tree
    (sols / "level1" / "9_Missing.py").write_text(solution())
    with pytest.raises(SystemExit, match=r"\(1, 9\)"):
        bench.find_pairs(root, sols)


def evaluate(bench, tmp_path, code: str, task: str = TASK) -> dict:
    return bench.kb.evaluate(task, code, str(tmp_path / "ext"), torch.device("cpu"))


def test_correct_solution_is_timed_as_kernelbench_times(bench, tmp_path):
    out = evaluate(bench, tmp_path, solution())
    assert out["verdict"] == "correct" and out["trials_passed"] == 5
    for key in ("runtime", "ref_runtime"):
        assert out[key]["num_trials"] == 100  # 101 timed, the first discarded
        assert out[key]["min"] <= out[key]["mean"] <= out[key]["max"]
    assert {"build", "correctness", "timing", "reference_timing"} <= set(out["stages"])


@pytest.mark.parametrize("code, verdict", [
    (solution(" + 1e-3"), "mismatch"),          # just outside atol + rtol * |ref| = 1e-4 + ...
    (solution("[:, :-1]"), "shape_mismatch"),
    (solution(" + undefined_name"), "runtime_error"),
    ("class ModelNew(:\n", "compile_error"),
    ("import torch.nn as nn\n\nclass Other(nn.Module):\n    pass\n", "compile_error"),
])
def test_failures_get_kernelbench_verdicts(bench, tmp_path, code, verdict):
    out = evaluate(bench, tmp_path, code)
    assert out["verdict"] == verdict
    assert "runtime" not in out  # only a correct solution is timed...
    # ...but KernelBench times the reference for every solution that built and loaded.
    assert ("ref_runtime" in out) == (verdict != "compile_error")


def test_tolerance_is_kernelbench_fp32(bench, tmp_path):
    assert evaluate(bench, tmp_path, solution(" + 5e-5"))["verdict"] == "correct"
    assert evaluate(bench, tmp_path, solution(" + 3e-4"))["verdict"] == "mismatch"


def test_trial_inputs_come_from_kernelbench_seeds(bench):
    """Trial t's input is get_inputs() right after seeding with the t-th draw of randint from seed 42."""
    seen = []

    class Recorder(torch.nn.Module):
        def forward(self, x):
            seen.append(x.clone())
            return x

    out = bench.kb.check_correctness(Recorder(), Recorder(), lambda: [torch.randn(3)], torch.device("cpu"))
    assert out["verdict"] == "correct"
    torch.manual_seed(42)
    seeds = [torch.randint(0, 2 ** 32 - 1, (1,)).item() for _ in range(5)]
    for index, seed in enumerate(seeds):
        torch.manual_seed(seed)
        expected = torch.randn(3)
        assert torch.equal(seen[2 * index], expected) and torch.equal(seen[2 * index + 1], expected)


def test_a_broken_task_is_a_task_error(bench, tmp_path):
    assert evaluate(bench, tmp_path, solution(), task="raise ValueError('no')\n")["verdict"] == "task_error"


def test_sequential_phase_runs_in_its_own_process(bench, tree, tmp_path):
    root, sols = tree
    pairs = bench.find_pairs(root, sols)[:2]
    phase = bench.run_sequential(pairs, tmp_path, budget_s=300, backend="cpu")
    assert phase["exit_code"] == 0 and not phase["stopped_at_budget"]
    assert [phase["rows"][p.id]["verdict"] for p in pairs] == ["correct", "correct"]
    first, second = (phase["rows"][p.id] for p in pairs)
    assert 0 < first["started_s"] < first["finished_s"] <= second["started_s"] <= phase["wall_s"]


def test_the_budget_kills_a_running_loop(bench):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    start = time.monotonic()
    assert bench._wait_or_kill(child, 0.5) is True
    assert time.monotonic() - start < 10 and child.returncode is not None


def fake_phase(rows: dict, wall: float, **extra) -> dict:
    return {"wall_s": wall, "rows": rows, "submitted": sorted(rows) + extra.pop("unjudged", []), **extra}


def test_report_counts_rates_and_names_disagreements(bench):
    pool = fake_phase({
        "level1/19": {"verdict": "correct", "finished_s": 100.0, "eager_us": 4000.0, "runtime_us": 3900.0,
                      "stages": {"build": 50.0, "timing": 2.0}},
        "level2/9": {"verdict": "mismatch", "finished_s": 150.0, "detail": "max diff 0.3", "stages": {"build": 70.0}},
        "level3/1": {"verdict": "sandbox_error", "finished_s": 160.0, "stages": {}},
    }, wall=170.0, unjudged=["level3/2"], gpu_utilisation_mean_pct=60.0, lane_busy_fraction=0.8, lane_slots=2,
        lane_slot_occupancy=0.55, lane_timing_fraction=0.25)
    seq = fake_phase({
        "level1/19": {"verdict": "correct", "finished_s": 90.0, "stages": {"build": 60.0},
                      "ref_runtime": {"mean": 4.4}, "runtime": {"mean": 3.8}},
        "level2/9": {"verdict": "correct", "finished_s": 200.0, "stages": {"build": 65.0}},
    }, wall=210.0, gpu_utilisation_mean_pct=20.0)
    published = {"h100_modal": {"level1/19": 4.0}}
    report = bench.assemble_report(pool, seq, published, {"note": "test"})
    summary = report["summary"]
    assert summary["pool"]["judged"] == 2 and summary["pool"]["span_s"] == 150.0
    assert summary["pool"]["judged_per_hour"] == pytest.approx(48.0)
    assert summary["pool"]["verdicts"] == {"correct": 1, "mismatch": 1, "not judged": 1, "sandbox_error": 1}
    assert summary["pool"]["stage_s_median"]["build"] == 60.0
    assert summary["sequential"]["judged_per_hour"] == pytest.approx(36.0)
    assert report["ratio_pool_over_sequential"] == pytest.approx(48.0 / 36.0)
    agree = report["agreement"]
    assert agree["judged_by_both"] == 2 and agree["agree"] == 1
    assert [d["id"] for d in agree["disagreements"]] == ["level2/9"]
    ratios = report["eager_vs_published"]
    assert ratios["pool_eager/h100_modal"]["geomean"] == pytest.approx(1.0)
    assert ratios["sequential_reference/h100_modal"]["geomean"] == pytest.approx(1.1)
    text = bench.markdown(report)
    assert "level2/9: pool mismatch" in text and "| level3/2 | not judged |" in text
    assert "1.33x" in text
    assert "| lane slots per device | 2 | - |" in text and "| exclusive timing fraction | 0.25 | - |" in text
    json.dumps(report)  # the --out file


def test_report_with_one_phase_only(bench):
    pool = fake_phase({"level1/19": {"verdict": "correct", "finished_s": 10.0, "stages": {}}}, wall=10.0)
    report = bench.assemble_report(pool, None, {}, {})
    assert report["agreement"] is None and report["ratio_pool_over_sequential"] is None
    assert "needs both phases" in bench.markdown(report)


def test_published_baselines_are_keyed_by_problem(bench, tmp_path):
    path = tmp_path / "timing" / "H100_modal" / "baseline_time_torch.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"level1": {"19_ReLU.py": {"mean": 4.27}, "100_HingeLoss.py": {"mean": 1.5},
                                           "23_Softmax.py": {"mean": 7.1, "hardware": "NVIDIA H200"}}}))
    assert bench.load_published_baselines(tmp_path) == {"h100_modal": {"level1/19": 4.27, "level1/100": 1.5}}


def test_help_runs_without_a_gpu():
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_kernelbench.py"), "--help"],
                         capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0 and "--sequential-budget-s" in out.stdout and "--lane-slots" in out.stdout


def test_lane_slots_reach_the_settings_and_zero_is_refused(bench, capsys):
    assert bench.parse_args(["--lane-slots", "2"]).lane_slots == 2
    assert bench.parse_args([]).lane_slots == 1  # the pool's default: one evaluation per lane
    with pytest.raises(SystemExit) as exc:
        bench.parse_args(["--lane-slots", "0"])
    assert exc.value.code == 2 and "--lane-slots must be >= 1" in capsys.readouterr().err


def test_two_one_phase_runs_combine_into_one_report(bench, tmp_path, capsys):
    pool = fake_phase({"level1/19": {"verdict": "correct", "finished_s": 60.0, "stages": {}}}, wall=60.0)
    seq = fake_phase({"level1/19": {"verdict": "mismatch", "finished_s": 120.0, "stages": {}}}, wall=120.0)
    first, second = tmp_path / "pool.json", tmp_path / "seq.json"
    first.write_text(json.dumps(bench.assemble_report(pool, None, {}, {})))
    second.write_text(json.dumps(bench.assemble_report(None, seq, {}, {})))
    out = tmp_path / "both.json"
    assert bench.main(["--combine", str(first), str(second), "--benchmark-root", str(tmp_path), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["ratio_pool_over_sequential"] == pytest.approx(2.0)
    assert report["agreement"]["disagreements"][0]["id"] == "level1/19"
    assert "level1/19: pool correct" in capsys.readouterr().out
