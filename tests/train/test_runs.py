"""Whole runs as a user starts them: a killed run resumes from its last checkpoint with the same
step count and optimiser state; DDP over 2 CPU processes (gloo) shares one sandbox pool; W&B
offline writes a run directory."""
from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from .conftest import ROOT, small_overrides


def last_ckpt(run: Path) -> dict:
    return torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)


def test_a_killed_run_resumes_with_its_step_count_and_optimizer_state(tiny_model_dir, sandbox_cache, tmp_path):
    run = tmp_path / "run"
    args = [sys.executable, "train.py", *small_overrides(tiny_model_dir, run, sandbox_cache),
            "stage=warmup", "trainer.max_steps=4"]
    env = dict(os.environ, CUDA_AGENT_CACHE=str(sandbox_cache))
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 600
    while not (run / "checkpoints" / "last.ckpt").exists() or last_ckpt(run)["global_step"] < 2:
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        assert time.monotonic() < deadline, "no checkpoint at step 2 within 10 minutes"
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)  # killed mid-run, workers and all
    proc.wait()
    killed_at = last_ckpt(run)["global_step"]
    assert 2 <= killed_at < 4
    again = subprocess.run(args + ["ckpt_path=last"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    final = last_ckpt(run)
    assert final["global_step"] == 4
    # Adam's per-parameter step counter continued from the killed run's, it did not restart.
    actor_state = final["optimizer_states"][0]["state"]
    assert {int(v["step"]) for v in actor_state.values()} == {4}
    with open(run / "metrics.csv") as f:
        steps = sorted({int(r["step"]) for r in csv.DictReader(f) if r.get("rollout/reward_mean")})
    assert steps[0] == 0 and steps[-1] == 3  # the first part's rows were kept, not replaced
    # A fresh start into a directory that holds a run is refused instead of overwriting it.
    refused = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "already holds a run" in refused.stderr


def test_a_run_killed_after_its_start_validation_has_it_on_disk(tiny_model_dir, sandbox_cache, tmp_path):
    """A machine lost between the validation before training and the first checkpoint: the
    validation's rows are already in metrics.csv before the first training step's, so
    family_pipeline.bank_start_validation can keep them for the restart. (The stage saves its
    loggers after logging them; Lightning's CSV logger also writes a row logged at step -1 at
    once, as its flush rule, (step + 1) % every == 0, holds there.)"""
    sys.path.insert(0, str(ROOT / "scripts"))
    import family_pipeline

    run = tmp_path / "run"
    args = [sys.executable, "train.py", *small_overrides(tiny_model_dir, run, sandbox_cache),
            "stage=warmup", "trainer.max_steps=50", "stage.module.validate_at_start=true"]
    env = dict(os.environ, CUDA_AGENT_CACHE=str(sandbox_cache))
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 600
    try:
        while not family_pipeline.has_start_validation(run):
            assert proc.poll() is None, "the run ended before its start validation was on disk: " + proc.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "no start validation on disk within 10 minutes"
            time.sleep(0.05)
        with open(run / "metrics.csv") as f:
            rows = list(csv.DictReader(f))
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    # Written when judged, before the first training step's rows (whose logging flushes the
    # logger too, and a machine may be lost before that step ends).
    assert [r["step"] for r in rows] == ["-1"] and rows[0]["val/reward_mean"]


def test_ddp_over_two_cpu_processes_shares_one_sandbox_pool(run_train, tmp_path):
    run = tmp_path / "ddp"
    out = run_train(run, "stage=warmup", "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2",
                    "stage.module.validate_at_start=true", timeout=900)
    assert out.returncode == 0, out.stderr[-4000:]
    ids = [line.split('"episode_id": "', 1)[1].split('"', 1)[0]
           for line in (run / "rollouts" / "train.jsonl").read_text().splitlines()]
    assert any("-r0-" in i for i in ids) and any("-r1-" in i for i in ids)  # both ranks ran episodes
    # The one held-out task before training: each rank ran it (padded share), one row logged.
    held_out = [line.split('"episode_id": "', 1)[1].split('"', 1)[0]
                for line in (run / "rollouts" / "val.jsonl").read_text().splitlines()]
    assert sorted(i.split("-")[2] for i in held_out) == ["r0", "r1"]
    with open(run / "metrics.csv") as f:
        assert [r["step"] for r in csv.DictReader(f) if r.get("val/reward_mean")] == ["-1"]
    assert "rank 1 judges through the sandbox pool of rank 0" in out.stderr  # one pool, not one per rank
    assert "device gate: off" in out.stderr  # ranks on one host never share a gate across all-reduces
    assert last_ckpt(run)["global_step"] == 2


def test_wandb_offline_writes_a_run_directory(run_train, tmp_path, wandb_records):
    import json

    run = tmp_path / "wandb"
    env_key = os.environ.pop("WANDB_API_KEY", None)
    try:
        out = run_train(run, "stage=warmup", "logger=wandb", "trainer.max_steps=1",
                        "stage.module.validate_at_start=true", timeout=600)
    finally:
        if env_key:
            os.environ["WANDB_API_KEY"] = env_key
    assert out.returncode == 0, out.stderr[-3000:]
    runs = list((run / "wandb").glob("offline-run-*"))
    assert runs and any(p.suffix == ".wandb" for p in runs[0].iterdir())
    assert (run / "metrics.csv").exists()  # the CSV logger runs beside it
    # The validation before training reached W&B at training step -1 (W&B's own step only grows).
    rows = [{i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
            for r in wandb_records(runs[0]) if r.WhichOneof("record_type") == "history"]
    assert [r["trainer/global_step"] for r in rows if "val/reward_mean" in r] == [-1]
