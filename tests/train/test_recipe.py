"""The paper's recipe as configs and commands: experiment=paper holds the paper's numbers; every
experiment (paper and its ablations) composes each of its stages and trains a step at tiny size;
pipeline=true runs the four stages in order, each from the previous one's checkpoint, and a rerun
skips finished stages; a 2-job multirun with W&B offline writes two runs of one group, and
``python -m src.compare`` draws their curves."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from .conftest import ROOT, SAMPLE_TASKS, small_overrides

EXPERIMENTS = sorted(p.stem for p in (ROOT / "conf" / "experiment").glob("*.yaml"))
STAGES = ("warmup", "rft", "value_pretrain", "agentic_rl")


def compose(*overrides: str, config: str = "train"):
    from hydra import compose as hydra_compose, initialize_config_dir

    import train  # noqa: F401  (registers the resolvers)

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose(config_name=config, overrides=list(overrides))


def tiny(model_dir: Path, out: Path, cache: Path) -> list[str]:
    """small_overrides, and the experiments' task set and verification trials patched down."""
    return small_overrides(model_dir, out, cache) + [f"data.tasks={SAMPLE_TASKS}", "sandbox.num_correct_trials=1",
                                                     "trainer.max_steps=1"]


def test_experiment_paper_holds_the_papers_numbers():
    from sandbox.config import TOLERANCE_PRESETS
    from sandbox.reward import meaningfully_faster

    stage = {name: compose("experiment=paper", f"stage={name}") for name in STAGES}
    for cfg in stage.values():
        assert cfg.reward.name == "graduated"  # Eq. 1
        assert cfg.sandbox.num_correct_trials == 5 and cfg.sandbox.tolerance == "paper"
        assert cfg.actor_optimizer.lr == 3e-6 and cfg.critic_optimizer.lr == 6e-6
        assert cfg.data.tasks_per_step * cfg.data.samples_per_task * cfg.trainer.devices == 1024
        assert cfg.data.tasks.endswith("data/ops_h200/tasks.parquet")
    for name in ("warmup", "value_pretrain", "agentic_rl"):
        assert (stage[name].stage.module.gamma, stage[name].stage.module.lam) == (1.0, 0.95)
    for name in ("warmup", "agentic_rl"):
        module = stage[name].stage.module
        assert (module.clip_low, module.clip_high) == (0.2, 0.28)
        assert module.actor_lam is None  # one GAE for actor and critic, as the paper
        assert module.mini_batches == 1 and module.ppo_epochs == 1  # global batch = mini-batch
        # Not stated by the paper: our choices.
        assert (module.kl_coef, module.entropy_coef, module.value_clip) == (0.0, 0.0, None)
    warmup, agentic = stage["warmup"], stage["agentic_rl"]
    assert (warmup.agent.mode, warmup.agent.max_turns, warmup.agent.max_context_tokens) == ("single_turn", 1, 32768)
    assert (agentic.agent.mode, agentic.agent.max_turns, agentic.agent.max_context_tokens) == \
        ("multi_turn", 150, 131072)
    assert agentic.trainer.max_steps == 150
    assert compose("agent=multi_turn", config="eval").agent.max_turns == 200
    # Strictly more than 5 % faster; the paper's tolerance 1e-2 for every dtype, ours stays the default.
    assert not meaningfully_faster(95.0, 100.0) and meaningfully_faster(94.99, 100.0)
    assert set(TOLERANCE_PRESETS["paper"].values()) == {1e-2}
    assert compose("stage=agentic_rl").sandbox.tolerance == "kernelbench"
    from omegaconf import OmegaConf

    mix = OmegaConf.load(ROOT / "conf" / "data_gen" / "pipeline.yaml").mix  # how data=ops_h200 was made
    assert list(mix.op_count_weights) == [3.40, 83.77, 7.62, 2.80, 1.23] and mix.transformers_weight == 1.18


def test_ablations_override_what_they_name():
    cfg = {name: compose(f"experiment={name}") for name in EXPERIMENTS}  # one compose each: ~1 s apiece
    assert cfg["continuous_reward"].reward.name == "continuous" and cfg["binary_reward"].reward.name == "binary"
    assert list(cfg["no_rft"].pipeline_stages) == ["warmup", "value_pretrain", "agentic_rl"]
    assert list(cfg["no_value_pretrain"].pipeline_stages) == ["warmup", "rft", "agentic_rl"]
    assert list(cfg["no_value_pretrain"].init_fresh) == ["critic"]
    assert list(cfg["no_warmup"].pipeline_stages) == ["rft", "value_pretrain", "agentic_rl"]
    assert list(cfg["single_turn"].pipeline_stages) == ["warmup"] and cfg["single_turn"].stage_steps.warmup == 150
    for name, one in cfg.items():  # each keeps the paper's numbers it does not ablate
        assert one.sandbox.tolerance == "paper" and one.actor_optimizer.lr == 3e-6 and one.trainer.max_steps == 150
        assert one.pipeline_dir == f"outputs/train/{name}"


def test_a_pipeline_override_a_stage_cannot_take_fails_before_any_stage_runs(run_train, tmp_path):
    from src.pipeline import compose_stages
    from train import UsageError

    out = run_train(tmp_path / "x", "pipeline=true", "stage=rft", "stage.module.sample_rounds=4",
                    f"pipeline_dir={tmp_path}", small=False, timeout=300)
    assert out.returncode == 2 and out.stderr.strip().splitlines()[-1].startswith(
        "error: pipeline stage warmup: Could not override 'stage.module.sample_rounds'"), out.stderr[-2000:]

    with pytest.raises(UsageError, match=r"^pipeline stage warmup: .*stage\.module\.sample_rounds"):
        compose_stages(["stage=rft", f"pipeline_dir={tmp_path}", "stage.module.sample_rounds=4"], {})
    with pytest.raises(UsageError, match="pipeline_stages .*'nope'"):
        compose_stages(["pipeline_stages=[warmup,nope]"], {})
    root, configs = compose_stages([f"pipeline_dir={tmp_path}", "pipeline_overrides.rft=['stage.module.sample_rounds=4']"],
                                   {})
    assert [c.stage.module.get("sample_rounds") for c in configs] == [None, 4, 2, None]  # one stage's override
    assert not any(tmp_path.iterdir())  # nothing written


# paper runs in the pipeline test, binary_reward and continuous_reward as the sweep test's two jobs.
@pytest.mark.parametrize("name", [e for e in EXPERIMENTS if e not in ("paper", "binary_reward", "continuous_reward")])
def test_every_experiment_composes_its_stages_and_trains_a_step(name, tiny_model_dir, sandbox_cache, tmp_path):
    from src.pipeline import compose_stages
    from train import train

    overrides = tiny(tiny_model_dir, tmp_path / "unused", sandbox_cache) + [
        f"experiment={name}", f"pipeline_dir={tmp_path / name}"]
    root, configs = compose_stages(overrides, {})
    assert [c.stage.name for c in configs] == list(compose(f"experiment={name}").pipeline_stages)
    assert [c.output_dir for c in configs] == [str(root / c.stage.name) for c in configs]
    run = tmp_path / "step"  # the experiment's last stage, one step, from the model as configured
    metrics = train(compose(*overrides, f"stage={configs[-1].stage.name}", f"output_dir={run}"))
    assert "rollout/reward_mean" in metrics and "actor/loss" in metrics
    assert torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["global_step"] == 1


def state(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)


def part(ckpt: dict, name: str) -> dict[str, torch.Tensor]:
    return {k: v for k, v in ckpt["state_dict"].items() if k.startswith(name + ".")}


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_pipeline_runs_the_stages_in_order_and_a_rerun_skips_finished_ones(tiny_model_dir, sandbox_cache,
                                                                          expert_trajectories, tmp_path, caplog):
    from omegaconf import OmegaConf

    from src.pipeline import DONE_FILE, run_pipeline

    root = tmp_path / "paper"
    overrides = tiny(tiny_model_dir, tmp_path / "ignored", sandbox_cache) + [
        "experiment=paper", "pipeline=true", f"pipeline_dir={root}",
        f"pipeline_overrides.rft=['stage.module.trajectories={expert_trajectories}']"]
    results = run_pipeline(overrides)
    assert list(results) == list(STAGES) and not (tmp_path / "ignored").exists()
    ckpts = {name: state(root / name) for name in STAGES}
    assert all((root / name / DONE_FILE).is_file() and ckpts[name]["global_step"] == 1 for name in STAGES)
    # Each stage started from the previous one: RFT carried the warm-up critic, value pretraining
    # the RFT actor (it trains only what it must), and fitted the trajectories RFT trained on.
    assert same(part(ckpts["rft"], "critic"), part(ckpts["warmup"], "critic"))
    assert not same(part(ckpts["rft"], "actor"), part(ckpts["warmup"], "actor"))
    assert same(part(ckpts["value_pretrain"], "actor"), part(ckpts["rft"], "actor"))
    assert not same(part(ckpts["value_pretrain"], "critic"), part(ckpts["rft"], "critic"))
    value_cfg = OmegaConf.load(root / "value_pretrain" / "hparams.yaml")
    assert value_cfg.stage.module.trajectories == str(expert_trajectories)
    assert value_cfg.init_from == str(root / "rft") and value_cfg.sandbox.tolerance == "paper"

    caplog.clear()
    with caplog.at_level("INFO", logger="train.pipeline"):
        again = run_pipeline(overrides)
    assert again == results and caplog.text.count("finished earlier") == 4
    assert all(state(root / name)["epoch"] == ckpts[name]["epoch"] for name in STAGES)
    assert all((root / name / "checkpoints" / "last.ckpt").stat().st_mtime_ns <=
               (root / name / DONE_FILE).stat().st_mtime_ns for name in STAGES)  # nothing trained again
    # A stage that stopped before it was marked done resumes from its last checkpoint.
    (root / "agentic_rl" / DONE_FILE).unlink()
    rows = (root / "agentic_rl" / "metrics.csv").read_text()
    run_pipeline(overrides)
    assert (root / "agentic_rl" / DONE_FILE).is_file() and state(root / "agentic_rl")["global_step"] == 1
    assert (root / "agentic_rl" / "metrics.csv").read_text().startswith(rows)


def test_rft_samples_of_every_rank_merge_into_one_file(tmp_path):
    from src.pipeline import merge_rank_files

    (tmp_path / "rollouts").mkdir()
    (tmp_path / "rollouts" / "sample.rank0.jsonl").write_text('{"a": 0}\n')
    (tmp_path / "rollouts" / "sample.rank1.jsonl").write_text('{"a": 1}\n')
    merged = merge_rank_files(tmp_path)
    assert merged.read_text() == '{"a": 0}\n{"a": 1}\n'
    assert merge_rank_files(tmp_path).read_text() == merged.read_text()  # idempotent
    assert sorted(p.name for p in (tmp_path / "rollouts").iterdir()) == [
        "sample.jsonl", "sample.rank0.jsonl", "sample.rank1.jsonl"]


def test_init_fresh_keeps_the_newly_built_part(tmp_path):
    from torch import nn

    from src.stages.common import InitError, load_init

    def stage() -> nn.Module:
        module = nn.Module()
        module.actor, module.critic = nn.Linear(2, 2), nn.Linear(2, 1)
        return module

    trained, fresh = stage(), stage()
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(1.0)
    path = tmp_path / "last.ckpt"
    torch.save({"state_dict": trained.state_dict()}, path)
    before = {k: v.clone() for k, v in fresh.critic.state_dict().items()}
    assert load_init(fresh, path, ("actor",), fresh=("critic",)) == {"actor": 2}
    assert same(fresh.actor.state_dict(), trained.actor.state_dict())
    assert same(fresh.critic.state_dict(), before)  # the no_value_pretrain ablation's fresh critic
    with pytest.raises(InitError, match="needs"):
        load_init(stage(), path, ("actor",), fresh=("actor",))


def test_a_two_job_sweep_writes_two_wandb_runs_of_one_group_and_compare_draws_them(run_train, tiny_model_dir,
                                                                                   sandbox_cache, tmp_path, monkeypatch,
                                                                                   wandb_records):
    from src.compare import main as compare_main

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    sweep = tmp_path / "ablations"
    out = run_train(tmp_path / "ignored", "-m", *tiny(tiny_model_dir, tmp_path / "ignored", sandbox_cache),
                    "experiment=binary_reward,continuous_reward", "stage=warmup", "logger=wandb",
                    f"hydra.sweep.dir={sweep}", small=False, timeout=900)
    assert out.returncode == 0, out.stderr[-4000:]
    jobs = {"0_experiment=binary_reward": "binary", "1_experiment=continuous_reward": "continuous"}
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == sorted(jobs)
    for job, reward in jobs.items():
        (run_dir,) = (sweep / job / "wandb").glob("offline-run-*")
        (run,) = [r.run for r in wandb_records(run_dir) if r.WhichOneof("record_type") == "run"]
        assert (run.run_group, run.display_name, run.job_type) == ("ablations", job.split("_", 1)[1], "warmup")
        config = {item.key: item.value_json for r in wandb_records(run_dir)
                  if r.WhichOneof("record_type") == "config" for item in r.config.update}
        assert json.loads(config["reward"]) == {"name": reward}  # the resolved config, carried
        assert json.loads(config["sandbox"])["tolerance"] == "paper"

    assert compare_main([str(sweep)]) == 0
    pngs = sorted((sweep / "compare").glob("*.png"))
    assert [p.name for p in pngs] == ["actor_entropy.png", "critic_explained_var.png",
                                      "rollout_faster_than_compile.png", "rollout_reward_mean.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    table = (sweep / "compare" / "summary.md").read_text().splitlines()
    assert table[0].startswith("| run | rollout/reward_mean final | rollout/reward_mean best |")
    rows = {line.split(" | ")[0].lstrip("| "): line for line in table[2:]}
    assert sorted(rows) == sorted(jobs) and all(" - |" not in line.split(" | ", 3)[1] for line in rows.values())


def test_compare_errors_are_one_line_with_exit_2(tmp_path, capsys):
    from src.compare import main as compare_main

    assert compare_main([str(tmp_path / "nope")]) == 2
    assert compare_main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "no such directory" in err[0] and "no run" in err[1]


def test_the_slurm_launcher_config_composes_with_the_submitit_plugin():
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="pip install hydra-submitit-launcher")
    from hydra import compose as hydra_compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = hydra_compose(config_name="train", overrides=["hydra/launcher=slurm", "hydra.launcher.partition=gpu",
                                                            "trainer=ddp", "trainer.devices=8"],
                            return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher") and launcher.partition == "gpu"
    assert (launcher.gpus_per_node, launcher.tasks_per_node, launcher.nodes) == (8, 8, 1)  # one DDP rank per GPU
