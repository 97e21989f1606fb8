"""The runner's bookkeeping without evaluations: rows for missing solutions, skipping what is
done, and refusing to resume into another run's directory. (Judged rows: test_eval_cpu.py.)"""
import dataclasses
import json
from pathlib import Path

import pytest

from sandbox.config import SandboxConfig
from sandbox.measurement import Measurement
from src.evaluation.kernelbench import load_problems
from src.evaluation.runner import (MISSING_SOLUTION, RunMismatchError, pin_run, run_identity,
                                   run_problems)

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kernelbench_sample"
CFG = SandboxConfig(backend="cpu")


@pytest.fixture(scope="module")
def level3():
    return load_problems(SAMPLE, [3])


def test_missing_solutions_are_failed_rows_with_every_field(level3, tmp_path):
    rows = run_problems(level3, {}, CFG, tmp_path / "results.jsonl", progress=False)
    assert [(r["level"], r["problem_id"], r["name"]) for r in rows] == [(3, 1, "Tiny_MLP"),
                                                                      (3, 2, "Residual_MLP_Block")]
    for row in rows:
        assert set(Measurement().to_dict()) <= set(row)
        assert (row["error"], row["correct"], row["reward"], row["solution"]) == (MISSING_SOLUTION, False, -1.0, None)
        assert row["error_detail"] == f"no solution for level 3 problem {row['problem_id']}"
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 2


def test_tasks_already_in_the_results_are_not_judged_again(level3, tmp_path):
    results = tmp_path / "results.jsonl"
    first = run_problems(level3[:1], {}, CFG, results, progress=False)
    # Now a "solution" exists for the recorded task: a resumed run must not judge it (had it
    # tried, this path would have produced an invalid_solution row).
    again = run_problems(level3[:1], {level3[0].key: tmp_path / "nowhere.py"}, CFG, results, progress=False)
    assert again == first and len(results.read_text().splitlines()) == 1


def test_rows_come_back_in_problem_order_whatever_the_file_order(level3, tmp_path):
    results = tmp_path / "results.jsonl"
    run_problems(level3[1:], {}, CFG, results, progress=False)
    rows = run_problems(level3, {}, CFG, results, progress=False)
    assert [r["problem_id"] for r in rows] == [1, 2]
    assert [json.loads(line)["problem_id"] for line in results.read_text().splitlines()] == [2, 1]


def test_run_identity_pins_the_verdict_settings(tmp_path):
    identity = run_identity(SAMPLE, "/solutions/a", CFG, "graduated")
    pin_run(tmp_path, identity)
    (tmp_path / "results.jsonl").write_text('{"level": 1, "problem_id": 1}\n')
    pin_run(tmp_path, identity)  # the same run, resumed
    longer = dataclasses.replace(CFG, run_timeout_s=3600.0, build_jobs=16)
    pin_run(tmp_path, run_identity(SAMPLE, "/solutions/a", longer, "graduated"))


@pytest.mark.parametrize("change, named", [
    ({"solutions": "/solutions/b"}, "solutions"),
    ({"cfg": dataclasses.replace(CFG, tolerance="paper")}, "sandbox.tolerance"),
    ({"cfg": dataclasses.replace(CFG, guards=False)}, "sandbox.guards"),
    ({"reward": "binary"}, "reward"),
])
def test_resuming_into_another_runs_directory_is_refused(tmp_path, change, named):
    pin_run(tmp_path, run_identity(SAMPLE, "/solutions/a", CFG, "graduated"))
    (tmp_path / "results.jsonl").write_text('{"level": 1, "problem_id": 1}\n')
    other = run_identity(SAMPLE, change.get("solutions", "/solutions/a"), change.get("cfg", CFG),
                         change.get("reward", "graduated"))
    with pytest.raises(RunMismatchError, match=f"holds results of a different run \\({named} changed\\)"):
        pin_run(tmp_path, other)


def test_a_run_that_judged_nothing_may_start_again_with_other_settings(tmp_path):
    pin_run(tmp_path, run_identity(SAMPLE, "/solutions/typo", CFG, "graduated"))
    fixed = run_identity(SAMPLE, "/solutions/a", CFG, "graduated")
    pin_run(tmp_path, fixed)
    assert json.loads((tmp_path / "run.json").read_text()) == fixed
