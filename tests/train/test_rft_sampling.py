"""RFT's sampling rule: further batches only while too few trajectories are kept, at most
max_sample_batches, the same rule for every run; and on a real tiny actor, the extra batch is
sampled into its own rollouts file and the clear error names how many batches ran."""
from __future__ import annotations

import json

import pytest

from src.stages.rft import sample_batch_tag, sample_until_kept


def batches_of(*rewards_per_batch: list[float]):
    """A collector handing out one batch of rows per call, recording the tags it was asked for."""
    asked: list[str] = []

    def collect(tag: str) -> list[dict]:
        rewards = rewards_per_batch[len(asked)]
        asked.append(tag)
        return [{"reward": r, "tag": tag} for r in rewards]

    return collect, asked


def keep_positive(rows: list[dict]) -> tuple[list[dict], dict]:
    kept = [r for r in rows if r["reward"] > 0]
    return kept, {"excluded": {"reward": len(rows) - len(kept)}}


def test_a_first_batch_that_keeps_enough_is_the_only_one():
    collect, asked = batches_of([-1, 1, -1], [3, 3, 3])
    rows, kept, summary, batches = sample_until_kept(collect, keep_positive, min_kept=1, max_batches=3)
    assert (asked, batches, len(rows), len(kept)) == (["sample"], 1, 3, 1)
    assert summary == {"excluded": {"reward": 2}}


def test_batches_follow_until_enough_are_kept_over_all_rows_so_far():
    collect, asked = batches_of([-1, -1], [-1, 1], [1, 3], [3, 3])
    rows, kept, summary, batches = sample_until_kept(collect, keep_positive, min_kept=2, max_batches=4)
    assert asked == ["sample", "sample2", "sample3"] and batches == 3
    assert [r["tag"] for r in kept] == ["sample2", "sample3", "sample3"]  # counted over every batch so far
    assert len(rows) == 6 and summary == {"excluded": {"reward": 3}}


def test_at_most_max_batches_and_min_kept_zero_is_one_batch():
    collect, asked = batches_of([-1], [-1], [-1])
    rows, kept, _, batches = sample_until_kept(collect, keep_positive, min_kept=1, max_batches=2)
    assert asked == ["sample", "sample2"] and kept == [] and batches == 2 and len(rows) == 2
    collect, asked = batches_of([-1], [-1])
    assert sample_until_kept(collect, keep_positive, min_kept=0, max_batches=2)[3] == 1 and asked == ["sample"]
    assert [sample_batch_tag(b) for b in range(3)] == ["sample", "sample2", "sample3"]


def test_a_tiny_actor_samples_its_extra_batch_into_its_own_file(compose_train, tmp_path):
    """The untrained tiny actor keeps nothing: with min_kept=1 and two batches, both are sampled
    (each sample_rounds episodes per task), each to its own file, then the one clear error."""
    from train import train

    run = tmp_path / "rft"
    with pytest.raises(ValueError, match=r"RFT has no trajectory to train on: 4 sampled \(2 sampling batches\)"):
        train(compose_train("stage=rft", "stage.module.sample_rounds=2", "stage.module.min_kept=1",
                            "stage.module.max_sample_batches=2", "data.max_tasks=1", out_dir=run))
    files = {p.name: p.read_text().splitlines() for p in (run / "rollouts").glob("*.jsonl")}
    assert {k: len(v) for k, v in files.items()} == {"sample.rank0.jsonl": 2, "sample2.rank0.jsonl": 2}
    ids = [json.loads(line)["episode_id"] for lines in files.values() for line in lines]
    assert len(set(ids)) == 4 and sum(i.startswith("sample2.") for i in ids) == 2


def test_max_sample_batches_below_one_is_refused(compose_train, tmp_path):
    from hydra.errors import InstantiationException

    from train import train

    # As the stages' other settings are checked: in the constructor, which Hydra's error wraps.
    with pytest.raises(InstantiationException, match="max_sample_batches must be at least 1, got 0"):
        train(compose_train("stage=rft", "stage.module.max_sample_batches=0", out_dir=tmp_path / "rft"))


def test_a_batch_cut_off_midway_is_resumed_sampling_only_the_episodes_it_lacks(compose_train, tmp_path):
    """A stopped sampling stage (no .done beside its batch) rerun in the same directory keeps the
    finished episode as it was written and samples only the missing one under the same id; the
    line cut off mid-write goes beside the file, not into the rows."""
    from train import train

    run = tmp_path / "rft"
    overrides = ("stage=rft", "stage.module.sample_rounds=2", "data.max_tasks=1")
    with pytest.raises(ValueError, match=r"2 sampled \(1 sampling batches\)"):
        train(compose_train(*overrides, out_dir=run))
    batch = run / "rollouts" / "sample.rank0.jsonl"
    first, second = batch.read_text().splitlines(keepends=True)
    (run / "rollouts" / "sample.rank0.done").unlink()
    batch.write_text(first + second[: len(second) // 2])  # stopped while writing the second episode
    with pytest.raises(ValueError, match=r"2 sampled \(1 sampling batches\)"):
        train(compose_train(*overrides, out_dir=run))
    lines = batch.read_text().splitlines(keepends=True)
    assert lines[0] == first and len(lines) == 2  # the finished episode was not sampled again
    ids = [json.loads(x)["episode_id"] for x in (first, second)]
    assert json.loads(lines[1])["episode_id"] == ids[1] != ids[0]
    assert (run / "rollouts" / "sample.rank0.jsonl.orig").read_text() == first + second[: len(second) // 2]
    assert (run / "rollouts" / "sample.rank0.done").exists()
