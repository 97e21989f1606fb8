"""benchmarks/episodes_by_plan.py: an episode's plan is the teacher opening its first reply starts
with (the task's own, not another task's); a resumed run's repeated episodes count once (a
validation's last judgement, a training step's completed attempt); the per-plan numbers and the
per-task comparison are the hand-computed ones; bad input stops with the reason."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import episodes_by_plan as ebp  # noqa: E402
from bench_plan_choice import openings  # noqa: E402

from data_gen.family import ChainSpec  # noqa: E402

SPECS = {"fam_a": {"dtype": "float32", "ops": ["mul_scalar:1.5"], "reduction": "sum", "shape": [256, 512]},
         "fam_b": {"dtype": "float32", "ops": ["gelu", "mul_weight"], "reduction": "max", "shape": [512, 1024]}}


@pytest.fixture()
def tasks(tmp_path) -> Path:
    path = tmp_path / "tasks.parquet"
    pq.write_table(pa.table({"id": list(SPECS), "spec": [json.dumps(s) for s in SPECS.values()]}), path)
    return path


def opening(task: str, plan: str) -> str:
    return openings(ChainSpec.from_json(json.dumps(SPECS[task])), "cpu")[plan]


def episode(eid: str, task: str, reply: str, reward: float, right: bool, step: int | None = None) -> dict:
    row = {"episode_id": eid, "task": f"{task}.py", "reward": reward,
           "final_measurement": {"compiled": True, "correct": right, "violations": [], "error": None},
           "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                        {"role": "assistant", "content": reply}, {"role": "tool", "content": "t"}]}
    if step is not None:
        row["train_step"] = step
    return row


def write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_plan_is_the_task_s_own_opening_of_the_first_reply(tasks):
    rows = [episode("val-s000003-r0-0000-fam_a", "fam_a", opening("fam_a", "vectorised") + '<tool_call>{"x": 1}', 3, True),
            episode("val-s000003-r0-0001-fam_a", "fam_a", opening("fam_a", "naive"), 1, True),
            episode("val-s000003-r0-0002-fam_b", "fam_b", opening("fam_b", "fused") + "more", 1, True),
            # fam_b's episode opening with fam_a's vectorised sentence: no plan of its own task
            episode("val-s000003-r0-0003-fam_b", "fam_b", opening("fam_a", "vectorised"), -1, False),
            episode("val-s000003-r0-0004-fam_a", "fam_a", "Let me think.", -1, False)]
    assert opening("fam_a", "vectorised") != opening("fam_b", "vectorised")
    plans = ebp.classify(rows, tasks, "cpu")
    assert [plans[id(r)] for r in rows] == ["vectorised", "naive", "fused", "other", "other"]


def test_a_resumed_run_counts_each_episode_once():
    judged_twice = [episode("val-s000003-r0-0000-fam_a", "fam_a", "", 1, True),
                    episode("val-s000003-r0-0001-fam_b", "fam_b", "", 2, True),
                    episode("val-s000003-r0-0000-fam_a", "fam_a", "", 3, True)]
    for per_step in (None, 4):  # a validation is kept whole whatever a training step samples
        kept, partial = ebp.latest(judged_twice, per_step)
        assert sorted((r["task"], r["reward"]) for r in kept) == [("fam_a.py", 3), ("fam_b.py", 2)]
        assert partial == []
    # step 0 stopped after 3 episodes, then sampled again whole (4 a step here); step 1 stopped
    stopped = [episode(f"train-s000000-r0-000{k}-fam_a", "fam_a", "", -1, False, step=0) for k in range(3)]
    whole = [episode(f"train-s000000-r0-000{k}-fam_b", "fam_b", "", 1, True, step=0) for k in range(4)]
    cut = [episode(f"train-s000001-r0-000{k}-fam_b", "fam_b", "", 3, True, step=1) for k in range(2)]
    kept, partial = ebp.latest(stopped + whole + cut, 4)
    assert [r["episode_id"] for r in kept] == [r["episode_id"] for r in whole]
    assert partial == [1]


def test_per_plan_numbers_and_the_per_task_comparison_are_hand_computed(tasks):
    vec, fused = opening("fam_a", "vectorised"), opening("fam_a", "fused")
    rows = [episode("train-s000000-r0-0000-fam_a", "fam_a", vec, 3, True, step=0),
            episode("train-s000000-r0-0001-fam_a", "fam_a", vec, -1, False, step=0),
            episode("train-s000001-r0-0000-fam_a", "fam_a", vec, 2, True, step=1),
            episode("train-s000001-r0-0001-fam_a", "fam_a", fused, 1, True, step=1)]
    found = ebp.summarise(rows, ebp.classify(rows, tasks, "cpu"))
    assert found["per_step"] == {0: {"vectorised": 2}, 1: {"vectorised": 1, "fused": 1}}
    assert found["by_plan"]["vectorised"] == pytest.approx(
        {"episodes": 3, "pass": 2 / 3, "reward_mean": 4 / 3, "reward_when_correct": 2.5, "threes": 1})
    assert found["by_plan"]["fused"]["reward_when_correct"] == 1.0

    before = [episode("val-s000000-r0-0000-fam_a", "fam_a", fused, 1, True),
              episode("val-s000000-r0-0001-fam_b", "fam_b", opening("fam_b", "fused"), 3, True)]
    after = [episode("val-s000003-r0-0000-fam_a", "fam_a", vec, 3, True),
             episode("val-s000003-r0-0001-fam_b", "fam_b", opening("fam_b", "naive"), 1, True)]
    out = ebp.compare(before, after, ebp.classify(before + after, tasks, "cpu"))
    assert (out["tasks"], out["up"], out["down"]) == (2, 1, 1)
    assert out["moves"] == {"1 -> 3": 1, "3 -> 1": 1}
    assert out["reward_mean"] == [2.0, 2.0]
    assert out["openings"] == [{"fused": 2}, {"vectorised": 1, "naive": 1}]


def test_the_command_line_and_bad_input(tasks, tmp_path, capsys):
    vec = opening("fam_a", "vectorised")
    before = write(tmp_path / "before.jsonl", [episode("val-s000000-r0-0000-fam_a", "fam_a", "", 1, True)])
    val = write(tmp_path / "val.jsonl", [episode("val-s000003-r0-0000-fam_a", "fam_a", vec, 3, True),
                                         episode("val-s000006-r0-0000-fam_a", "fam_a", vec, 2, True)])
    out = tmp_path / "out.json"
    assert ebp.main([str(val), "--tasks", str(tasks), "--compare", str(before), str(val),
                     "--compare-steps", "0", "3", "--out", str(out)]) == 0
    results = json.loads(out.read_text())
    assert results["compare"]["moves"] == {"1 -> 3": 1}
    assert results["files"][str(val)]["per_step"] == {"3": {"vectorised": 1}, "6": {"vectorised": 1}}
    # without --compare-steps each file's last step: step 6's judgement
    assert ebp.main(["--tasks", str(tasks), "--compare", str(before), str(val)]) == 0
    assert '"1 -> 2": 1' in capsys.readouterr().out

    with pytest.raises(SystemExit) as missing:
        ebp.main([str(tmp_path / "nope.jsonl"), "--tasks", str(tasks)])
    assert missing.value.code == 2
    empty = write(tmp_path / "empty.jsonl", [{"task": "fam_a.py"}])
    with pytest.raises(SystemExit, match="no episode rows"):
        ebp.main([str(empty), "--tasks", str(tasks)])
    with pytest.raises(SystemExit, match="no episodes of step 9"):
        ebp.main(["--tasks", str(tasks), "--compare", str(before), str(val), "--compare-steps", "0", "9"])
    other = write(tmp_path / "other.jsonl", [episode("val-s000000-r0-0000-fam_b", "fam_b", "", 1, True)])
    with pytest.raises(SystemExit, match="share no task"):
        ebp.main(["--tasks", str(tasks), "--compare", str(before), str(other)])


def test_score_reads_each_reward_again_from_the_measurement_it_was_taken_from(tasks, tmp_path, capsys):
    """Episodes judged under the binary reward, read by the graduated one: 3 beats eager and
    compile by > 5 %, 2 eager only, 1 neither, -1 failed or never measured; a ``best``-sourced
    reward is read from the best measurement, not the final one."""
    def timed(runtime, eager, compile_, right=True) -> dict:
        return {"compiled": True, "correct": right, "violations": [], "error": None,
                "runtime_us": runtime, "eager_us": eager, "compile_us": compile_}

    vec = opening("fam_a", "vectorised")
    rows = [episode(f"val-s000003-r0-000{k}-fam_a", "fam_a", vec, 1, True) for k in range(5)]
    rows[0]["final_measurement"] = timed(80.0, 100.0, 90.0)     # 3
    rows[1]["final_measurement"] = timed(80.0, 100.0, 82.0)     # 2 (compile within 5 %)
    rows[2]["final_measurement"] = timed(99.0, 100.0, 50.0)     # 1
    rows[3].update(reward=-1, final_measurement=timed(10.0, 100.0, 90.0, right=False))  # -1
    rows[4].update(final_measurement=None, reward_source="best", best_measurement=timed(10.0, 100.0, 90.0))  # 3
    graded = ebp.rescored(rows, "graduated")
    assert [r["reward"] for r in graded] == [3.0, 2.0, 1.0, -1.0, 3.0]
    assert [r["reward"] for r in rows] == [1, 1, 1, -1, 1]  # the rows read are left as they were
    assert [r["reward"] for r in ebp.rescored(rows, "continuous")] == pytest.approx([90 / 80, 82 / 80, 50 / 99, -1, 9.0])
    assert ebp.rescored([{**rows[0], "final_measurement": None}], "graduated")[0]["reward"] == -1.0

    path = write(tmp_path / "val.jsonl", rows)
    out = tmp_path / "out.json"
    assert ebp.main([str(path), "--tasks", str(tasks), "--score", "graduated", "--out", str(out)]) == 0
    vectorised = json.loads(out.read_text())["files"][str(path)]["by_plan"]["vectorised"]
    assert vectorised["reward_mean"] == pytest.approx(8 / 5) and vectorised["threes"] == 2
    with pytest.raises(SystemExit) as unknown:
        ebp.main([str(path), "--tasks", str(tasks), "--score", "speed"])
    assert unknown.value.code == 2
    assert "unknown reward 'speed'" in capsys.readouterr().err
