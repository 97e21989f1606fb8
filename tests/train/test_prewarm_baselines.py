"""The rollout DataModule's baseline prewarm: every task's eager / torch.compile baselines timed
at set-up, into the same cache the rollouts' evaluations read (so none pays them in a step)."""
from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from sandbox.baselines import cached_baselines
from sandbox.judge import evaluate_baselines
from src.data.rollout import RolloutDataModule

TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__(){init}

    def forward(self, x):
        return torch.{op}(x) * {scale}


def get_inputs():
    return [torch.randn(64, 128)]


def get_init_inputs():
    return []
"""


def write_tasks(root):
    root.mkdir()
    for name, op, scale in (("relu_scale", "relu", 2.0), ("tanh_scale", "tanh", 0.5), ("sigmoid_scale", "sigmoid", 3.0)):
        (root / f"{name}.py").write_text(TASK.format(init="", op=op, scale=scale))
    # Usable as a task file (a Model, get_inputs), but its reference cannot be built.
    (root / "broken_init.py").write_text(TASK.format(init="\n        raise RuntimeError('no reference')",
                                                     op="relu", scale=1.0))


@pytest.fixture()
def datamodule(tmp_path):
    write_tasks(tmp_path / "tasks")
    # No torch.compile baseline: the same cache path, without minutes of inductor on 2 cores.
    sandbox = {"backend": "cpu", "cache_dir": str(tmp_path / "cache"), "compile_baseline": False}
    dm = RolloutDataModule(tasks=str(tmp_path / "tasks"), output_dir=str(tmp_path / "out"), sandbox=sandbox,
                           reward="graduated", val_fraction=0.25, val_max_tasks=1, prewarm_baselines=2)
    yield dm
    dm.teardown()


def test_setup_times_every_task_into_the_rollouts_cache(datamodule, caplog):
    datamodule.prepare()
    tasks = datamodule.train_tasks + datamodule.val_tasks
    assert len(tasks) == 4 and datamodule.val_tasks
    cfg = datamodule.sandbox_config()
    with caplog.at_level(logging.INFO, logger="src.data.rollout"):
        datamodule.setup("fit")
    assert "baselines of 4 tasks ready" in caplog.text and "1 refused" in caplog.text
    assert "no reference" in caplog.text  # the refused task is named with the sandbox's reason
    usable = [t for t in tasks if t.path.stem != "broken_init"]
    for task in usable:
        m = evaluate_baselines(task.path, cfg)
        assert m.baseline_cached, f"{task.id}: not in the cache after the prewarm"
        assert m.eager_us > 0
    # The cache is keyed by the sandbox settings: other timing settings miss it.
    other = replace(cfg, timing=replace(cfg.timing, repeats=cfg.timing.repeats + 1))
    assert cached_baselines(usable[0].path, other) is None
    assert not evaluate_baselines(usable[0].path, other).baseline_cached


def test_a_later_setup_reads_cached_baselines_without_timing_them_again(datamodule, caplog):
    datamodule.prepare()
    datamodule.setup("fit")
    cfg = datamodule.sandbox_config()
    usable = [t for t in datamodule.train_tasks + datamodule.val_tasks if t.path.stem != "broken_init"]
    # Read in this process under the key the reference worker stored them under.
    for task in usable:
        cached = cached_baselines(task.path, cfg)
        assert cached is not None, f"{task.id}: the worker's cache entry is not found from outside it"
        assert cached["eager"]["median_us"] == pytest.approx(evaluate_baselines(task.path, cfg).eager_us)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="src.data.rollout"):
        datamodule.prewarm()
    # Only the task the sandbox refused (never cached) is tried again.
    assert "3 cached before, 1 timed" in caplog.text and "1 refused" in caplog.text


def test_prewarm_is_off_by_default_and_refuses_a_negative_count(tmp_path):
    write_tasks(tmp_path / "tasks")
    sandbox = {"backend": "cpu", "cache_dir": str(tmp_path / "cache"), "compile_baseline": False}
    dm = RolloutDataModule(tasks=str(tmp_path / "tasks"), output_dir=str(tmp_path / "out"), sandbox=sandbox,
                           reward="graduated")
    dm.setup("fit")
    try:
        assert not (tmp_path / "cache" / "baselines").exists()
    finally:
        dm.teardown()
    with pytest.raises(ValueError, match="prewarm_baselines=-1"):
        RolloutDataModule(tasks=str(tmp_path / "tasks"), output_dir=str(tmp_path / "out"), sandbox=sandbox,
                          reward="graduated", prewarm_baselines=-1)
