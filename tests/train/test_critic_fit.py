"""benchmarks/bench_critic_fit.py on a stage written like a real one: the critic is read from the
stage's checkpoint (a value head set to 0.5, not the fresh zero head), values are taken on the
policy tokens only, and a critic that predicts one constant explains nothing of the outcome."""
from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_critic_fit  # noqa: E402

from src.models import build_critic, load_actor  # noqa: E402

PROMPT, REPLY = 3, 5


@pytest.fixture
def constant_critic_stage(tiny_model_dir, tmp_path):
    stage = tmp_path / "value"
    shutil.copytree(tiny_model_dir, stage / "actor")
    actor = load_actor(str(tiny_model_dir))
    parts = bench_critic_fit.Parts(actor, build_critic(actor))
    with torch.no_grad():
        parts.critic.value_head.bias.fill_(0.5)
    (stage / "checkpoints").mkdir()
    torch.save({"state_dict": parts.state_dict()}, stage / "checkpoints" / "last.ckpt")
    return stage


def write_rows(path: Path, rewards: list[float]) -> Path:
    rows = [{"token_ids": [5 + (i + k) % 9 for k in range(PROMPT + REPLY)], "loss_mask": [0] * PROMPT + [1] * REPLY,
             "logprobs": [0.0] * (PROMPT + REPLY), "reward": reward, "sampling": {"temperature": 1.0}}
            for i, reward in enumerate(rewards)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_constant_critic_read_from_the_stage_explains_nothing(constant_critic_stage, tmp_path):
    rows = write_rows(tmp_path / "train.jsonl", [-1.0, 1.0, 3.0])
    out = tmp_path / "fit.json"
    assert bench_critic_fit.main(["--stage", str(constant_critic_stage), "--trajectories", str(rows),
                                  "--out", str(out)]) == 0
    fit = json.loads(out.read_text())["files"][str(rows)]
    assert fit["episodes"] == 3 and fit["tokens"] == 3 * REPLY
    assert fit["value_mean"] == pytest.approx(0.5, abs=1e-6)  # the checkpoint's head, not a fresh one
    assert fit["outcome_mean"] == pytest.approx(1.0)
    assert fit["ev_outcome"] == pytest.approx(0.0, abs=1e-6)
    assert math.isnan(fit["first_token_corr"])  # one value for every episode: no correlation defined


def test_unusable_input_is_refused_with_the_reason(constant_critic_stage, tmp_path, capsys):
    with pytest.raises(SystemExit) as missing:
        bench_critic_fit.main(["--stage", str(tmp_path / "nowhere"), "--trajectories", str(tmp_path / "x.jsonl")])
    assert missing.value.code == 2 and "no such file or directory" in capsys.readouterr().err
    no_config = tmp_path / "no_config"
    shutil.copytree(constant_critic_stage, no_config)
    (no_config / "actor" / "config.json").unlink()
    with pytest.raises(SystemExit) as unreadable:
        bench_critic_fit.main(["--stage", str(no_config), "--trajectories", str(write_rows(tmp_path / "r.jsonl", [1.0]))])
    assert unreadable.value.code == 2 and "no actor/config.json" in capsys.readouterr().err
    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps({"token_ids": [1, 2], "loss_mask": [0, 0], "reward": 1.0}) + "\n")
    with pytest.raises(SystemExit, match="no trajectory rows with token ids and policy tokens"):
        bench_critic_fit.main(["--stage", str(constant_critic_stage), "--trajectories", str(empty)])


def test_a_stage_without_the_actor_weights_reads_the_critic_from_its_checkpoint(tiny_model_dir, tmp_path):
    """A stage returned from a device call keeps actor/ as config and tokenizer only: the critic,
    backbone and head, must still be the checkpoint's (the same values as with the weights there)."""
    stage = tmp_path / "value"
    shutil.copytree(tiny_model_dir, stage / "actor")
    actor = load_actor(str(tiny_model_dir))
    parts = bench_critic_fit.Parts(actor, build_critic(actor))
    with torch.no_grad():  # values that depend on every backbone weight, unlike the zero head's
        torch.manual_seed(0)
        parts.critic.value_head.weight.normal_()
        for param in parts.critic.parameters():
            param.add_(0.01 * torch.randn_like(param))
    (stage / "checkpoints").mkdir()
    torch.save({"state_dict": parts.state_dict()}, stage / "checkpoints" / "last.ckpt")
    rows = bench_critic_fit.read_rows(write_rows(tmp_path / "train.jsonl", [-1.0, 1.0, 3.0]))
    with_weights = bench_critic_fit.fit(*bench_critic_fit.load_critic(stage), rows, 0.95)
    weight_files = [f for f in (stage / "actor").iterdir() if f.suffix in (".safetensors", ".bin")]
    assert weight_files
    for f in weight_files:
        f.unlink()
    config_only = bench_critic_fit.fit(*bench_critic_fit.load_critic(stage), rows, 0.95)
    assert with_weights["value_mean"] != pytest.approx(0.0, abs=1e-3)
    for key in ("value_mean", "ev_outcome", "first_token_corr"):
        assert config_only[key] == pytest.approx(with_weights[key], rel=1e-5, abs=1e-6)
