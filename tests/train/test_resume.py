"""A resumed stage validates exactly the steps an uninterrupted one does: the validation a lost
run owed (its checkpoint is the step's own, written before the validation ran) runs at the
resume, and one that had finished (the checkpoint written again after it) does not run twice."""
from __future__ import annotations

import csv

import pytest
import torch

from .conftest import small_overrides


def rows_by_step(run, column):
    with open(run / "metrics.csv") as f:
        return sorted(int(r["step"]) for r in csv.DictReader(f) if r.get(column))


def test_a_resume_at_a_validation_step_runs_the_validation_it_owes(run_train, tmp_path):
    run = tmp_path / "run"
    # The state of a run lost while validating after its last step: checkpoint written, no validation.
    first = run_train(run, "stage=warmup", "trainer.max_steps=2", "trainer.val_check_interval=2",
                      "trainer.limit_val_batches=0")
    assert first.returncode == 0, first.stderr[-3000:]
    assert rows_by_step(run, "val/reward_mean") == []
    again = run_train(run, "stage=warmup", "trainer.max_steps=2", "trainer.val_check_interval=2", "ckpt_path=last")
    assert again.returncode == 0, again.stderr[-3000:]
    # Logged where Lightning logs the validation after the second update.
    assert rows_by_step(run, "val/reward_mean") == [1]
    assert "owed by the checkpoint resumed from; replies generated on cpu" in again.stderr + again.stdout


@pytest.mark.gpu
def test_the_validation_owed_at_the_last_step_is_generated_on_the_gpu(run_train, tiny_model_dir, sandbox_cache,
                                                                       tmp_path):
    """A run resumed at its last step validates in on_fit_end, after Lightning's teardown has
    moved the module to the CPU: its episodes are generated on the GPU all the same (the family
    pipeline's case: the model on the GPU, the CPU sandbox timing kernels on the host's cores)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    run = tmp_path / "run"
    on_gpu = [o if o != "trainer=cpu" else "trainer=gpu" for o in small_overrides(tiny_model_dir, run, sandbox_cache)]
    first = run_train(run, *on_gpu, "stage=warmup", "trainer.max_steps=2", "trainer.val_check_interval=2",
                      "trainer.limit_val_batches=0", small=False)
    assert first.returncode == 0, first.stderr[-3000:]
    again = run_train(run, *on_gpu, "stage=warmup", "trainer.max_steps=2", "trainer.val_check_interval=2",
                      "ckpt_path=last", small=False)
    assert again.returncode == 0, again.stderr[-3000:]
    assert rows_by_step(run, "val/reward_mean") == [1]
    assert "owed by the checkpoint resumed from; replies generated on cuda" in again.stderr + again.stdout


def test_a_resume_after_a_finished_validation_does_not_repeat_it(run_train, tmp_path):
    run = tmp_path / "run"
    first = run_train(run, "stage=warmup", "trainer.max_steps=2", "trainer.val_check_interval=1")
    assert first.returncode == 0, first.stderr[-3000:]
    assert rows_by_step(run, "val/reward_mean") == [0, 1]
    last = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["global_step"] == 2 and last["validated_step"] == 2  # written again after the validation
    again = run_train(run, "stage=warmup", "trainer.max_steps=3", "trainer.val_check_interval=1", "ckpt_path=last")
    assert again.returncode == 0, again.stderr[-3000:]
    assert rows_by_step(run, "val/reward_mean") == [0, 1, 2]
    assert rows_by_step(run, "rollout/reward_mean") == [0, 1, 2]
    final = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert final["global_step"] == 3
    assert {int(v["step"]) for v in final["optimizer_states"][0]["state"].values()} == {3}


def test_a_resumed_ppo_stage_keeps_its_starting_actor_as_the_kl_reference(run_train, tmp_path):
    """The KL term's reference is the actor the stage started from. Lightning restores a resumed
    run's weights before on_fit_start, so a reference copied there was the resumed actor: the
    first update after a resume then measured KL 0 (one mini-batch: the actor had not moved from
    it yet). train.py freezes it before the checkpoint is restored."""
    run = tmp_path / "run"
    common = ("stage=warmup", "stage.module.kl_coef=0.5", "actor_optimizer.lr=1e-2")
    first = run_train(run, *common, "trainer.max_steps=1")
    assert first.returncode == 0, first.stderr[-3000:]
    again = run_train(run, *common, "trainer.max_steps=2", "ckpt_path=last")
    assert again.returncode == 0, again.stderr[-3000:]
    with open(run / "metrics.csv") as f:
        kl = {int(r["step"]): float(r["actor/kl"]) for r in csv.DictReader(f) if r.get("actor/kl")}
    assert abs(kl[0]) < 1e-7  # the first update: the actor is its own reference
    assert kl[1] > 1e-6  # after the resume: measured against the starting actor, which step 0 moved away from


def test_validation_is_owed_only_at_a_validation_step_not_yet_validated():
    from types import SimpleNamespace

    from src.stages.common import validation_owed

    def trainer(step, every=3, limit=1.0, val_tasks=("t",)):
        return SimpleNamespace(global_step=step, val_check_batch=every, limit_val_batches=limit,
                               datamodule=SimpleNamespace(val_tasks=list(val_tasks)))

    assert validation_owed(trainer(3), 0) and validation_owed(trainer(6), 3)
    assert not validation_owed(trainer(3), 3)  # it finished: the checkpoint was written again after it
    assert not validation_owed(trainer(4), 3)  # not a validation step
    assert not validation_owed(trainer(0), 0)  # nothing trained yet (the start validation is its own rule)
    assert not validation_owed(trainer(3), None)  # a checkpoint from before this was recorded
    assert not validation_owed(trainer(3, limit=0), 0) and not validation_owed(trainer(3, val_tasks=()), 0)
    assert not validation_owed(trainer(3, every=float("inf")), 0)


def test_a_restarted_ppo_start_takes_the_episodes_its_stopped_start_finished(compose_train, tmp_path):
    """A PPO stage stopped in its start validation or first step (no checkpoint: it starts again
    from the same actor) keeps each finished episode as it was written and runs only the missing
    ones under the same ids; lines cut off mid-write go beside. The episodes' wall times differ
    from run to run, so a line written again would not be the same line."""
    import json

    from train import train

    overrides = ("stage=warmup", "trainer.max_steps=1", "stage.module.validate_at_start=true",
                 "data.val_samples_per_task=2")
    train(compose_train(*overrides, out_dir=tmp_path / "whole"))
    stopped = tmp_path / "stopped"
    (stopped / "rollouts").mkdir(parents=True)
    kept = {}
    for name in ("val.jsonl", "train.jsonl"):
        first, second = (tmp_path / "whole" / "rollouts" / name).read_text().splitlines(keepends=True)
        kept[name] = (first, json.loads(second)["episode_id"])
        (stopped / "rollouts" / name).write_text(first + second[: len(second) // 2])
    train(compose_train(*overrides, out_dir=stopped))
    for name, (first, missing) in kept.items():
        lines = (stopped / "rollouts" / name).read_text().splitlines(keepends=True)
        assert lines[0] == first and len(lines) == 2, name  # the finished episode was not run again
        assert json.loads(lines[1])["episode_id"] == missing != json.loads(first)["episode_id"]
        assert (stopped / "rollouts" / f"{name}.orig").exists()
    assert rows_by_step(stopped, "val/reward_mean") == [-1] and rows_by_step(stopped, "rollout/reward_mean") == [0]


def test_a_ppo_stage_resumed_in_a_step_takes_the_episodes_the_stopped_run_finished(compose_train, tmp_path):
    """Resumed from its step-1 checkpoint, a stage draws step 1's tasks again (StepBatches) and
    takes the episodes the stopped run finished for them; step 0's rows stay in the shared file."""
    import json

    from train import train

    overrides = ("stage=warmup", "trainer.max_steps=2")
    train(compose_train(*overrides, out_dir=tmp_path / "whole"))
    lines = (tmp_path / "whole" / "rollouts" / "train.jsonl").read_text().splitlines(keepends=True)
    assert [json.loads(x)["train_step"] for x in lines] == [0, 0, 1, 1]
    stopped = tmp_path / "stopped"
    train(compose_train("stage=warmup", "trainer.max_steps=1", out_dir=stopped))
    path = stopped / "rollouts" / "train.jsonl"
    step0 = path.read_text().splitlines(keepends=True)
    # The stopped run got as far as step 1's first episode (that of the uninterrupted run, whose
    # tasks a resumed run must draw too: else that episode is dropped and its task run again).
    path.write_text("".join(step0) + lines[2] + lines[3][:40])
    train(compose_train(*overrides, "ckpt_path=last", out_dir=stopped))
    after = path.read_text().splitlines(keepends=True)
    assert after[:3] == step0 + [lines[2]] and len(after) == 4
    assert json.loads(after[3])["episode_id"] == json.loads(lines[3])["episode_id"]
