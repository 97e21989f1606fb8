"""scripts/plot_family.py's held-out comparison: the point before PPO is the agentic stage's own
validation before its first update (step -1) where it ran, else the start stage's; each seed's
change and the verdict "above beyond the spread of seeds", on hand-made metrics.csv files."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import plot_family  # noqa: E402

from .conftest import write_metrics_csv  # noqa: E402




def ppo_run(runs: Path, seed: int, before: float, after: float, ablation: str = "full") -> None:
    """An agentic stage whose held-out reward is ``before`` at step -1 and ``after`` at its last
    validation (a middle one at step 1 in between)."""
    write_metrics_csv(runs / "graduated" / f"seed{seed}" / f"agentic_{ablation}", [
        {"step": -1, "val/reward_mean": before, "val/pass_rate": 0.5, "val/best_pass_rate": 0.5},
        {"step": 0, "rollout/reward_mean": 0.25},
        {"step": 1, "rollout/reward_mean": 0.5, "val/reward_mean": 9.0},  # not the last: ignored
        {"step": 3, "val/reward_mean": after, "val/pass_rate": 0.75, "val/best_pass_rate": 0.875},
    ])


def test_each_seeds_change_and_the_verdict_beyond_the_spread_of_seeds(tmp_path):
    runs = tmp_path / "runs"
    for seed, (before, after) in enumerate([(-0.5, 0.5), (0.0, 0.25), (0.25, 1.0)]):
        ppo_run(runs, seed, before, after)
    summary = plot_family.summarise(plot_family.find_runs(runs))["graduated/full"]
    reward = summary["change"]["val/reward_mean"]
    assert reward["per_seed"] == {0: 1.0, 1: 0.25, 2: 0.75}
    assert reward["spread"]["mean"] == pytest.approx(2.0 / 3) and reward["spread"]["min"] == 0.25
    # Lowest after (0.25) is not above the highest before (0.25): not beyond the spread.
    assert reward["above_beyond_spread"] is False
    assert summary["change"]["val/pass_rate"]["above_beyond_spread"] is True  # 0.75 > 0.5 on every seed
    assert summary["aggregate"]["before_ppo"]["val/reward_mean"]["mean"] == pytest.approx(-0.25 / 3)
    assert summary["change"]["val/best_pass_rate"]["per_seed"] == {0: 0.375, 1: 0.375, 2: 0.375}

    ppo_run(runs, 1, 0.0, 0.3)  # seed 1 now ends above every seed's start
    summary = plot_family.summarise(plot_family.find_runs(runs))["graduated/full"]
    assert summary["change"]["val/reward_mean"]["above_beyond_spread"] is True
    table = plot_family.markdown({"graduated/full": summary})
    for title in ("held-out reward mean, the run's own reward", "held-out reward mean, read by the graduated reward"):
        assert f"| graduated/full | {title} | 3 | -0.083 ± 0.382 | 0.600 ± 0.361 | +1.000, +0.300, +0.750 | yes |" \
            in table


def test_the_held_out_reward_compares_rewards_by_the_graduated_reading_never_by_mixed_scales(tmp_path):
    """A graduated stage's own reward mean is its graduated reading (runs from before the reading
    was logged); a binary stage's is not: it has the logged reading or none."""
    runs = tmp_path / "runs"
    ppo_run(runs, 0, before=1.0, after=2.5)
    write_metrics_csv(runs / "binary" / "seed0" / "agentic_full", [
        {"step": -1, "val/reward_mean": 0.5, "val/graduated_reward_mean": 1.25},
        {"step": 0, "rollout/reward_mean": 0.5},
        {"step": 3, "val/reward_mean": 1.0},  # judged before the reading was logged
    ])
    summary = plot_family.summarise(plot_family.find_runs(runs))
    common = plot_family.COMMON_HELDOUT
    graduated, binary = summary["graduated/full"]["seeds"][0], summary["binary/full"]["seeds"][0]
    assert (graduated["before_ppo"][common], graduated["after_ppo"][common]) == (1.0, 2.5)
    assert (binary["before_ppo"][common], binary["after_ppo"][common]) == (1.25, None)
    assert (binary["before_ppo"]["val/reward_mean"], binary["after_ppo"]["val/reward_mean"]) == (0.5, 1.0)
    assert common not in summary["binary/full"]["change"]
    binary_stage, graduated_stage = (runs / r / "seed0" / "agentic_full" for r in ("binary", "graduated"))
    assert "rollout/graduated_reward_mean" not in plot_family.on_common_scale(plot_family.read_stage(binary_stage),
                                                                               binary_stage)
    logged = plot_family.read_stage(graduated_stage)
    assert "rollout/graduated_reward_mean" not in logged  # read as logged; filled only on the common scale
    assert plot_family.on_common_scale(logged, graduated_stage)["rollout/graduated_reward_mean"] == [(0, 0.25), (1, 0.5)]
    assert plot_family.read_stage(tmp_path / "absent") == {}


def test_a_run_without_a_start_validation_falls_back_on_the_rft_stage_and_one_seed_has_no_verdict(tmp_path):
    runs = tmp_path / "runs"
    seed = runs / "graduated" / "seed0"
    write_metrics_csv(seed / "rft", [{"step": 2, "val/reward_mean": -0.25}])
    write_metrics_csv(seed / "agentic_full", [{"step": 0, "rollout/reward_mean": 0.0}, {"step": 2, "val/reward_mean": 0.5}])
    # A stage stopped after its start validation only: no point after PPO yet.
    write_metrics_csv(seed / "agentic_no_value", [{"step": -1, "val/reward_mean": 0.125}])
    summary = plot_family.summarise(plot_family.find_runs(runs))
    full = summary["graduated/full"]
    assert full["seeds"][0]["before_ppo"]["val/reward_mean"] == -0.25
    assert full["change"]["val/reward_mean"]["per_seed"] == {0: 0.75}
    assert full["change"]["val/reward_mean"]["above_beyond_spread"] is None
    stopped = summary["graduated/no_value"]
    assert stopped["seeds"][0]["before_ppo"]["val/reward_mean"] == 0.125
    assert stopped["seeds"][0]["after_ppo"]["val/reward_mean"] is None and "val/reward_mean" not in stopped["change"]
    assert plot_family.main(["--runs", str(runs), "--out", str(tmp_path / "out")]) == 0
    assert "best-state" not in (tmp_path / "out" / "family_summary.md").read_text()  # none logged: no rows
    written = json.loads((tmp_path / "out" / "family_summary.json").read_text())
    assert written["graduated/full"]["change"]["val/reward_mean"]["per_seed"] == {"0": 0.75}


def test_a_stage_another_validated_for_takes_that_ones_start_point(tmp_path):
    runs = tmp_path / "runs"
    ppo_run(runs, 0, before=-0.5, after=0.5)  # graduated/seed0/agentic_full validated RFT's actor
    other = runs / "binary" / "seed0" / "agentic_no_value"
    write_metrics_csv(other, [{"step": 0, "rollout/reward_mean": 0.0}, {"step": 3, "val/reward_mean": 1.5}])
    (other / plot_family.START_VALIDATION).write_text(json.dumps({"stage": "graduated/seed0/agentic_full"}))
    summary = plot_family.summarise(plot_family.find_runs(runs))
    assert summary["binary/no_value"]["seeds"][0]["before_ppo"]["val/reward_mean"] == -0.5
    assert summary["binary/no_value"]["change"]["val/reward_mean"]["per_seed"] == {0: 2.0}
    # The graduated stage judged that start by the graduated reward: its reading; the binary
    # stage's own after point, logged without one, has none.
    assert summary["binary/no_value"]["seeds"][0]["before_ppo"][plot_family.COMMON_HELDOUT] == -0.5
    assert summary["binary/no_value"]["seeds"][0]["after_ppo"][plot_family.COMMON_HELDOUT] is None


def test_the_start_step_is_the_one_the_stages_log_at():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    import family_pipeline

    from src.data.rollout import COMMON_REWARD
    from src.stages.common import BEFORE_TRAINING_STEP

    assert plot_family.BEFORE_TRAINING_STEP == BEFORE_TRAINING_STEP  # the script reads what the stage writes
    assert plot_family.COMMON_REWARD == COMMON_REWARD
    assert plot_family.START_VALIDATION == family_pipeline.START_VALIDATION


def test_a_start_validation_kept_from_an_earlier_start_is_followed_through_pointers(tmp_path):
    """family_pipeline.bank_start_validation: a restarted PPO stage names its earlier start's
    validation (<stage>.start), and a stage that names it in turn reaches the same point; the kept
    directory is not a run of its own."""
    runs = tmp_path / "runs"
    seed = runs / "graduated" / "seed0"
    write_metrics_csv(seed / "agentic_full.start", [{"step": -1, "val/reward_mean": -0.75}])
    write_metrics_csv(seed / "agentic_full", [{"step": 0, "rollout/reward_mean": 0.0}, {"step": 5, "val/reward_mean": 0.5}])
    (seed / "agentic_full" / plot_family.START_VALIDATION).write_text(
        json.dumps({"stage": "graduated/seed0/agentic_full.start"}))
    other = runs / "binary" / "seed0" / "agentic_full"
    write_metrics_csv(other, [{"step": 5, "val/reward_mean": 1.0}])
    (other / plot_family.START_VALIDATION).write_text(json.dumps({"stage": "graduated/seed0/agentic_full"}))
    assert set(plot_family.find_runs(runs)) == {("graduated", "full"), ("binary", "full")}
    summary = plot_family.summarise(plot_family.find_runs(runs))
    assert summary["graduated/full"]["change"]["val/reward_mean"]["per_seed"] == {0: 1.25}
    assert summary["binary/full"]["change"]["val/reward_mean"]["per_seed"] == {0: 1.75}


def test_the_hosts_that_ran_a_stage_come_from_the_journal_in_order(tmp_path):
    runs = tmp_path / "runs"
    ppo_run(runs, 0, 0.0, 0.5)
    ppo_run(runs, 1, 0.0, 0.5)
    lines = [{"stage": "/dev/a/runs/graduated/seed0/agentic_full", "status": "stopped", "host": "cpu:X x16, gpu:H200"},
             {"stage": "/dev/a/runs/graduated/seed0/value", "status": "done", "host": "cpu:Y x2"},
             {"stage": "/dev/b/runs/graduated/seed0/agentic_full", "status": "stopped", "host": "cpu:Z x16, gpu:H100"},
             {"stage": "/dev/c/runs/graduated/seed0/agentic_full", "status": "done", "host": "cpu:X x16, gpu:H200"},
             {"stage": "/dev/c/runs/graduated/seed10/agentic_full", "status": "done", "host": "cpu:W x1"},
             {"stage": "/dev/a/runs/graduated/seed1/agentic_full", "status": "done"}]  # before hosts were recorded
    (runs / "pipeline.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + "not json\n")
    summary = plot_family.summarise(plot_family.find_runs(runs))
    # X, Z, X: each run's host, repeats in a row collapsed (two lines on X in a row would be one).
    assert summary["graduated/full"]["seeds"][0]["hosts"] == ["cpu:X x16, gpu:H200", "cpu:Z x16, gpu:H100",
                                                               "cpu:X x16, gpu:H200"]
    assert summary["graduated/full"]["seeds"][1]["hosts"] == []
    table = plot_family.markdown(summary)
    assert "- graduated/full seed 0: cpu:X x16, gpu:H200; then cpu:Z x16, gpu:H100; then cpu:X x16, gpu:H200" in table
    assert "- graduated/full seed 1: not recorded" in table


def test_a_stage_ended_on_another_host_takes_its_before_point_from_the_judge_run_there(tmp_path):
    runs = tmp_path / "runs"
    ppo_run(runs, 0, 0.25, 1.0)
    seed = runs / "graduated" / "seed0"
    write_metrics_csv(seed / "judge_rft", [{"step": -1, "val/reward_mean": -0.5, "val/pass_rate": 0.25}])
    a, b = "cpu:A x16, gpu:H200", "cpu:B x16, gpu:H100"

    def journal(*entries):
        (runs / "pipeline.jsonl").write_text("".join(json.dumps({"stage": f"/x/runs/graduated/seed0/{s}", "host": h}) + "\n"
                                                     for s, h in entries))

    def before():
        d = plot_family.summarise(plot_family.find_runs(runs))["graduated/full"]["seeds"][0]
        return d["before_ppo"]["val/reward_mean"], d["before_judged_by"]

    journal(("agentic_full", a), ("agentic_full", b), ("judge_rft", b))
    assert before() == (-0.5, "judge_rft")  # started on A, ended on B, judged again on B
    journal(("agentic_full", a), ("agentic_full", b), ("judge_rft", a))
    assert before() == (0.25, None)  # the judge ran on A, not where the stage ended
    journal(("agentic_full", b), ("judge_rft", b))
    assert before() == (0.25, None)  # one host throughout: the stage's own start point
    journal(("agentic_full", a), ("agentic_full", b), ("agentic_full", a), ("judge_rft", b))
    assert before() == (0.25, None)  # started and ended on A (B in between): its own start point
    journal(("agentic_full", a), ("agentic_full", b), ("judge_rft", b))
    summary = plot_family.summarise(plot_family.find_runs(runs))
    assert summary["graduated/full"]["change"]["val/reward_mean"]["per_seed"] == {0: 1.5}
    assert "(before PPO: judge_rft, judged again on the last)" in plot_family.markdown(summary)


def test_each_stages_held_out_decoding_comes_from_its_config(tmp_path):
    runs = tmp_path / "runs"
    for seed in range(3):
        ppo_run(runs, seed, 0.0, 0.5)
    stage = lambda seed: runs / "graduated" / f"seed{seed}" / "agentic_full"  # noqa: E731
    (stage(0) / "hparams.yaml").write_text("sampling:\n  temperature: 1.0\n  val_temperature: 0.0\n")
    (stage(1) / "hparams.yaml").write_text("sampling:\n  temperature: 0.7\n")  # before val_temperature
    summary = plot_family.summarise(plot_family.find_runs(runs))["graduated/full"]
    assert [summary["seeds"][k]["heldout_decoding"] for k in range(3)] == ["greedy", "T=0.7", None]
    table = plot_family.markdown({"graduated/full": summary})
    assert "seed 0: not recorded; held-out episodes decoded greedy" in table
    assert "seed 2: not recorded; held-out episodes decoded as not recorded" in table
