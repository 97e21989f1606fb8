"""benchmarks/bench_family_load.py: its settings reach the sandbox config, its noise figure is
per solution, and every judgement of a run builds (no build of an earlier run is reused)."""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_family_load import (choose, harness_beside_wins, parse_sets, runtime_shift, runtime_spread,  # noqa: E402
                               sandbox_config, write_workspaces)


def test_settings_nest_and_reach_the_sandbox_config():
    sets = parse_sets(["timing.harness_beside_timing=true", "timing.repeats=7", "lane_slots=8", "cache_dir=/x"])
    assert sets == {"timing": {"harness_beside_timing": True, "repeats": 7}, "lane_slots": 8, "cache_dir": "/x"}
    cfg = sandbox_config(lane_slots=4, lane_cpus=0, sets=sets)
    assert cfg.backend == "cpu" and cfg.lane_slots == 8 and cfg.timing.harness_beside_timing
    assert cfg.timing.repeats == 7 and cfg.timing.cpu_threads == 1  # the rest of timing kept
    with pytest.raises(SystemExit, match="key=value"):
        parse_sets(["lane_slots"])


def test_the_runtime_spread_is_taken_within_each_solution():
    records = [{"solution": "t1/naive", "runtime_us": v} for v in (100.0, 110.0, 90.0)]
    records += [{"solution": "t2/fused", "runtime_us": v} for v in (1000.0, 1000.0)]
    records += [{"solution": "t3/naive", "runtime_us": 5.0}, {"solution": "t3/naive", "runtime_us": None}]
    spread = runtime_spread(records)
    cv_t1 = statistics.pstdev([100.0, 110.0, 90.0]) / 100.0
    # t3 has one runtime only; pooling t1 and t2 (CV > 0.7) would be another figure altogether.
    assert spread == {"median_cv": round(cv_t1 / 2, 4), "max_cv": round(cv_t1, 4), "n": 2}
    assert runtime_spread([]) == {"n": 0}


def test_every_workspace_of_a_run_is_a_new_build(tmp_path):
    first = write_workspaces(2, ["naive", "vectorised"], 5, "run-a pool 0", tmp_path / "a")
    again = write_workspaces(2, ["naive", "vectorised"], 5, "run-b pool 0", tmp_path / "b")
    assert [s for _, _, s in first] == [s for _, _, s in again] and len({s for _, _, s in first}) >= 3

    def kernels(triples):
        return [sorted((w / "kernels").glob("*.cpp"))[0].read_text() for _, w, _ in triples]

    sources = kernels(first) + kernels(again)
    assert len(set(sources)) == len(sources)
    assert all(task.exists() for task, _, _ in first)


def run(per_s: float, cv, times: dict | None = None) -> dict:
    """An --out file's content: its summary, and records holding ``times`` (solution -> runtimes)."""
    records = [{"solution": k, "runtime_us": t} for k, ts in (times or {}).items() for t in ts]
    return {"summary": {"per_s": per_s, "runtime_spread": {"n": 0} if cv is None else {"median_cv": cv, "n": 8}},
            "records": records}


TIMES = {"a/naive": [100.0, 102.0, 98.0], "b/naive": [10.0, 10.0], "c/fused": [7.0]}
# b 10% slower, a and c 2% slower: the median ratio is 1.02.
SLOWER = {"a/naive": [102.0, 104.0, 100.0], "b/naive": [11.0, 11.0], "c/fused": [7.14], "d/new": [1.0]}
# every solution 10% slower.
BIASED = {"a/naive": [110.0, 112.2, 107.8], "b/naive": [11.0, 11.0], "c/fused": [7.7]}


def test_the_runtime_shift_is_the_median_ratio_over_solutions_both_runs_timed():
    assert runtime_shift([r for r in run(0, None, TIMES)["records"]],
                         run(0, None, SLOWER)["records"]) == pytest.approx(1.02)
    assert runtime_shift(run(0, None, TIMES)["records"], run(0, None, BIASED)["records"]) == pytest.approx(1.10)
    assert runtime_shift(run(0, None, TIMES)["records"], run(0, None, {"x/y": [1.0]})["records"]) is None


@pytest.mark.parametrize("without, beside, wins", [
    (run(0.30, 0.08, TIMES), run(0.33, 0.09, SLOWER), True),    # faster, noise within 25 %, 2 % slower
    (run(0.30, 0.08, TIMES), run(0.33, 0.09, BIASED), False),   # every solution timed 10 % slower
    (run(0.30, 0.08), run(0.33, 0.11), False),   # faster, but noise +38 % and +0.03
    (run(0.30, 0.01), run(0.33, 0.025), True),   # both quiet: within 0.02
    (run(0.30, 0.08), run(0.29, 0.05), False),   # slower
    (run(0.30, None), run(0.31, 0.2), True),     # no spread to compare: throughput decides
])
def test_the_harness_goes_beside_timing_only_when_faster_unbiased_and_not_much_noisier(without, beside, wins):
    assert harness_beside_wins(without, beside) is wins


def test_choose_reads_two_runs_and_refuses_what_is_not_one(tmp_path, capsys):
    import json

    without, beside, other = tmp_path / "without.json", tmp_path / "beside.json", tmp_path / "other.json"
    without.write_text(json.dumps(run(0.30, 0.08, TIMES)))
    beside.write_text(json.dumps(run(0.33, 0.09, SLOWER)))
    other.write_text(json.dumps({"records": []}))
    assert choose([str(without), str(beside)]) == 0 and capsys.readouterr().out == "true\n"
    assert choose([str(beside), str(without)]) == 0 and capsys.readouterr().out == "false\n"
    for bad in ([str(without), str(tmp_path / "missing.json")], [str(without), str(other)]):
        assert choose(bad) == 2
        assert capsys.readouterr().err.startswith("error: --choose needs two --out files")
