"""benchmarks/baselines_report.py: a baselines run over a small tree, against hand-computed ratios."""
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TASK = "class Model: pass\ndef get_inputs(): return []\ndef get_init_inputs(): return []\n"


@pytest.fixture(scope="module")
def report_module(load_script):
    return load_script("benchmarks/baselines_report.py")


@pytest.fixture
def run(tmp_path):
    """A tree of 3 problems over two levels, published PCIe times for all, and a run that timed two
    (the first line of level1/1 is superseded by a resumed run's line)."""
    root = tmp_path / "kb"
    for rel in ("level1/1_A.py", "level1/2_B.py", "level2/1_C.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(TASK)
    timing = root / "timing" / "H100_PCIe_LambdaLabs" / "baseline_time_torch.json"
    timing.parent.mkdir(parents=True)
    timing.write_text(json.dumps({"level1": {"1_A.py": {"mean": 2.0}, "2_B.py": {"mean": 1.0}},
                                  "level2": {"1_C.py": {"mean": 4.0}}}))
    first = tmp_path / "first.jsonl"
    first.write_text(json.dumps({"id": "level1/1_A.py", "eager_us": 9000.0, "compile_us": 1.0}) + "\n")
    resumed = tmp_path / "resumed.jsonl"
    resumed.write_text("\n".join(json.dumps(r) for r in (
        {"id": "level1/1_A.py", "eager_us": 1000.0, "compile_us": 500.0, "compile_s": 3.0},
        {"id": "level2/1_C.py", "eager_us": 1000.0, "compile_us": 2000.0, "compile_s": 5.0,
         "compile_error": "BackendCompilerFailed: boom"})) + "\n")
    dmon = tmp_path / "dmon.txt"
    dmon.write_text("# gpu     sm    mem\n# Idx      %      %\n    0      0      1\n    0     30      2\n    0      -      -\n")
    return root, [first, resumed], dmon


def test_report_counts_ratios_and_missing_problems(report_module, run):
    root, records, dmon = run
    data = report_module.report(report_module.read_records(records), root, [dmon])
    assert data["timed"] == 2 and data["problems"] == 3
    assert data["missing"] == ["level1/2_B.py"]
    assert data["compile_errors"] == {"level2/1_C.py": "BackendCompilerFailed: boom"}
    ratios = data["eager_over_published"]
    # level1/1: 1.0 ms over 2.0 ms (the resumed line, not the first one's 9 ms); level2/1: 1.0 / 4.0.
    assert ratios["h100_pcie/level1"]["geomean"] == pytest.approx(0.5)
    assert ratios["h100_pcie/level2"]["geomean"] == pytest.approx(0.25)
    assert ratios["h100_pcie/all"]["geomean"] == pytest.approx(math.sqrt(0.5 * 0.25))
    assert data["compile_over_eager"]["geomean"] == pytest.approx(math.sqrt(0.5 * 2.0))
    assert data["compile_over_eager"]["compile_faster"] == 1
    assert data["gpu"] == {"samples": 2, "sm_mean_pct": 15.0, "nonzero": 1}
    assert data["compile_s_median"] == pytest.approx(4.0)


def test_outliers_are_the_ratios_more_than_twice_off_the_geomean(report_module):
    summary = report_module.ratio_summary({"a": 1.0, "b": 1.0, "c": 1.0, "d": 16.0})
    # geomean = 16 ** (1/4) = 2: d is 8x above it; a, b and c are exactly 2x below, not more.
    assert summary["geomean"] == pytest.approx(2.0)
    assert summary["outliers"] == {"d": 16.0}


def test_cli_prints_the_table_and_names_a_missing_file(run, tmp_path):
    root, records, dmon = run
    script = str(REPO / "benchmarks" / "baselines_report.py")
    out = subprocess.run([sys.executable, script, *map(str, records), "--benchmark-root", str(root),
                          "--dmon", str(dmon), "--json", str(tmp_path / "r.json")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "Timed 2 of 3 problems" in out.stdout and "level2/1_C.py: BackendCompilerFailed" in out.stdout
    assert json.loads((tmp_path / "r.json").read_text())["timed"] == 2
    bad = subprocess.run([sys.executable, script, str(tmp_path / "nope.jsonl"), "--benchmark-root", str(root)],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "nope.jsonl" in bad.stderr and "Traceback" not in bad.stderr
