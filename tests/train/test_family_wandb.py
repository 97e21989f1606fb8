"""scripts/family_wandb.py: offline W&B runs from the family pipeline's metrics.csv files (for runs
made on a host where wandb could not go), read back from W&B's own run files."""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import family_wandb  # noqa: E402

from .conftest import write_metrics_csv  # noqa: E402


def stage(runs: Path, rel: str, rows: list[dict], config: str = "") -> None:
    d = runs / rel
    write_metrics_csv(d, rows)
    if config:
        (d / "hparams.yaml").write_text(config)


def history(records) -> dict[int, dict[str, float]]:
    """training step (trainer/global_step) -> metrics of the run's history records."""
    out = {}
    for r in records:
        if r.WhichOneof("record_type") == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
            step = int(items.pop("trainer/global_step"))
            out[step] = {k: v for k, v in items.items() if not k.startswith("_")}
    return out


def test_each_stage_run_becomes_an_offline_run_with_its_steps_group_and_config(tmp_path, monkeypatch, wandb_records):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    runs = tmp_path / "runs"
    stage(runs, "graduated/seed0/agentic_full", [
        {"step": -1, "val/reward_mean": -0.25},  # validation before the first update
        {"step": 0, "rollout/reward_mean": 0.25, "critic/explained_var": -0.005},
        {"step": 1, "rollout/reward_mean": 0.75, "critic/explained_var": 0.001},
        {"step": 1, "val/reward_mean": 0.5, "val/pass_rate": 0.5},  # validation after step 1: its own row
        {"step": 2, "rollout/reward_mean": -0.125, "critic/explained_var": 0.003},
    ], config="seed: 0\nactor_optimizer:\n  lr: 5.0e-05\n")
    stage(runs, "graduated/seed0/rft.uncarried", [{"step": 0, "rft/loss": 1.0}])  # set aside: not a run
    stage(runs, "binary/seed1/agentic_full", [{"step": 0, "rollout/reward_mean": 1.0}])
    assert family_wandb.main(["--runs", str(runs), "--out", str(tmp_path / "wb")]) == 0

    found = {}
    for run_dir in (tmp_path / "wb" / "wandb").glob("offline-run-*"):
        records = wandb_records(run_dir)
        (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
        config = {i.key: json.loads(i.value_json) for i in run.config.update}  # the config wandb.init was given
        found[run.display_name] = (run.run_group, run.job_type, config, history(records))
    assert sorted(found) == ["binary-seed1-agentic_full", "graduated-seed0-agentic_full"]
    group, job, config, steps = found["graduated-seed0-agentic_full"]
    assert (group, job) == ("graduated-agentic_full", "agentic_full")
    assert config["seed"] == 0 and config["actor_optimizer"] == {"lr": 5e-05}
    assert steps == {-1: {"val/reward_mean": -0.25},
                     0: {"rollout/reward_mean": 0.25, "critic/explained_var": -0.005},
                     1: {"rollout/reward_mean": 0.75, "critic/explained_var": 0.001,
                         "val/reward_mean": 0.5, "val/pass_rate": 0.5},
                     2: {"rollout/reward_mean": -0.125, "critic/explained_var": 0.003}}
    assert found["binary-seed1-agentic_full"][3] == {0: {"rollout/reward_mean": 1.0}}


def test_no_runs_is_one_line_and_exit_2(tmp_path, capsys):
    assert family_wandb.main(["--runs", str(tmp_path), "--out", str(tmp_path / "wb")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_a_stage_validated_elsewhere_gets_that_validation_at_step_minus_one(tmp_path, monkeypatch, wandb_records):
    """A restarted PPO stage names its earlier start's kept validation (<stage>.start), and a
    stage of another reward names that one: both W&B runs carry the point before training."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    runs = tmp_path / "runs"
    stage(runs, "graduated/seed0/agentic_full.start", [{"step": -1, "val/reward_mean": -0.5, "val/pass_rate": 0.25}])
    stage(runs, "graduated/seed0/agentic_full", [{"step": 0, "rollout/reward_mean": 0.25}])
    (runs / "graduated/seed0/agentic_full/start_validation.json").write_text(
        json.dumps({"stage": "graduated/seed0/agentic_full.start"}))
    stage(runs, "binary/seed0/agentic_full", [{"step": 0, "rollout/reward_mean": 1.0}])
    (runs / "binary/seed0/agentic_full/start_validation.json").write_text(
        json.dumps({"stage": "graduated/seed0/agentic_full"}))
    assert family_wandb.main(["--runs", str(runs), "--out", str(tmp_path / "wb")]) == 0

    found = {}
    for run_dir in (tmp_path / "wb" / "wandb").glob("offline-run-*"):
        records = wandb_records(run_dir)
        (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
        found[run.display_name] = history(records)
    # The kept folder is not a run of its own.
    assert sorted(found) == ["binary-seed0-agentic_full", "graduated-seed0-agentic_full"]
    before = {"val/reward_mean": -0.5, "val/pass_rate": 0.25}
    assert found["graduated-seed0-agentic_full"] == {-1: before, 0: {"rollout/reward_mean": 0.25}}
    assert found["binary-seed0-agentic_full"] == {-1: before, 0: {"rollout/reward_mean": 1.0}}
