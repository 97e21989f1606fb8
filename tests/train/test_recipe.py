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
    def cfg(name: str, stage: str = "agentic_rl"):
        return compose(f"experiment={name}", f"stage={stage}")

    assert cfg("continuous_reward").reward.name == "continuous" and cfg("binary_reward").reward.name == "binary"
    assert list(cfg("no_rft").pipeline_stages) == ["warmup", "value_pretrain", "agentic_rl"]
    assert list(cfg("no_value_pretrain").pipeline_stages) == ["warmup", "rft", "agentic_rl"]
    assert list(cfg("no_value_pretrain").init_fresh) == ["critic"]
    assert list(cfg("no_warmup").pipeline_stages) == ["rft", "value_pretrain", "agentic_rl"]
    single = cfg("single_turn", "warmup")
    assert list(single.pipeline_stages) == ["warmup"] and single.trainer.max_steps == 150
    for name in EXPERIMENTS:  # and each keeps the paper's numbers it does not ablate
        assert cfg(name).sandbox.tolerance == "paper" and cfg(name).actor_optimizer.lr == 3e-6


@pytest.mark.parametrize("name", [e for e in EXPERIMENTS if e != "paper"])  # paper: the pipeline test below
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
