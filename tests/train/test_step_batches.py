"""The training tasks of a PPO step are a function of the step: an epoch's batches are a
permutation of the tasks, the ranks' shares are disjoint, and a run resumed from a checkpoint in
the middle of an epoch (real Lightning) draws at each step the tasks an uninterrupted run draws,
which a step's resume needs (the episodes of the step a stopped run was cut off in are taken by
task)."""
from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch

from src.data.rollout import StepBatches

TASKS = [f"task{i}" for i in range(7)]


def test_an_epochs_batches_are_a_permutation_and_the_next_epoch_another():
    batches = StepBatches(TASKS, 2, seed=5, step=lambda: 0)
    assert len(batches) == 3  # 7 tasks, 2 a step: the 7th waits for another epoch's order
    epoch0, epoch1 = [sum((batches.batch(s) for s in range(e * 3, e * 3 + 3)), []) for e in (0, 1)]
    assert len(set(epoch0)) == 6 and set(epoch0) <= set(TASKS)
    assert epoch0 != epoch1
    assert list(batches) == [batches.batch(s) for s in range(3)]
    assert StepBatches(TASKS, 2, seed=6, step=lambda: 0).batch(0) != batches.batch(0) or \
        StepBatches(TASKS, 2, seed=6, step=lambda: 0).batch(1) != batches.batch(1)


def test_an_iteration_starts_at_the_trainers_step_and_ends_with_its_epoch():
    step = [4]
    batches = StepBatches(TASKS, 2, seed=5, step=lambda: step[0])
    assert list(batches) == [batches.batch(4), batches.batch(5)]
    step[0] = 6
    assert list(batches) == [batches.batch(6), batches.batch(7), batches.batch(8)]


def test_the_ranks_shares_of_a_step_are_disjoint_and_cover_the_epoch():
    ranks = [StepBatches(TASKS, 1, seed=2, step=lambda: 0, rank=r, world=2) for r in range(2)]
    assert [len(r) for r in ranks] == [3, 3]
    for step in range(3):
        assert not set(ranks[0].batch(step)) & set(ranks[1].batch(step))
    assert len({t for r in ranks for s in range(3) for t in r.batch(s)}) == 6


class Recorder(pl.LightningModule):
    """Records the tasks each training step gets; a real optimiser step per batch."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.seen: dict[int, list[str]] = {}

    def training_step(self, tasks, batch_idx):
        self.seen[int(self.global_step)] = list(tasks)
        return self.layer(torch.ones(1, 1)).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        return StepBatches(TASKS, 2, seed=3, step=lambda: self.trainer.global_step)


def fit(tmp_path, max_steps: int, ckpt_path=None) -> dict[int, list[str]]:
    from lightning.pytorch.callbacks import ModelCheckpoint

    module = Recorder()
    trainer = pl.Trainer(max_steps=max_steps, accelerator="cpu", logger=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=tmp_path,
                         callbacks=[ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=1,
                                                    save_last=True)])
    trainer.fit(module, ckpt_path=ckpt_path)
    return module.seen


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_run_resumed_mid_epoch_draws_each_steps_tasks_as_an_uninterrupted_one(tmp_path):
    whole = fit(tmp_path / "whole", 8)
    order = StepBatches(TASKS, 2, seed=3, step=lambda: 0)
    assert whole == {step: order.batch(step) for step in range(8)}  # three epochs' worth, each its own order
    first = fit(tmp_path / "cut", 4)  # stopped after step 4, in the middle of the second epoch
    resumed = fit(tmp_path / "cut", 8, ckpt_path=str(tmp_path / "cut" / "ckpt" / "last.ckpt"))
    assert sorted(resumed) == [4, 5, 6, 7]
    assert {**first, **resumed} == whole
