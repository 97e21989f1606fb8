"""A sampling batch cut off midway (a stopped run) is resumed from its trajectory file: the
finished episodes of the batch are taken by id, and the file keeps exactly those whole lines for
the rerun's appends, the rest kept beside."""
from __future__ import annotations

import json

from src.agent.trajectory import resume_trajectories


def line(eid: str, reward: float) -> str:
    return json.dumps({"episode_id": eid, "reward": reward}) + "\n"


def test_the_batchs_whole_episodes_are_taken_and_the_rest_kept_beside(tmp_path):
    path = tmp_path / "sample.rank0.jsonl"
    original = line("b", 2.0) + line("x", 1.0) + line("b", -1.0) + line("a", 3.0) + '{"episode_id": "c", "rew'
    path.write_text(original)
    found = resume_trajectories(path, ["a", "b", "c", "d"])
    assert {eid: row["reward"] for eid, row in found.items()} == {"b": 2.0, "a": 3.0}  # the first of a repeat
    assert path.read_text() == line("b", 2.0) + line("a", 3.0)  # the lines as written, for appends
    assert (tmp_path / "sample.rank0.jsonl.orig").read_text() == original
    # A second resume of the same batch (cut off again) drops nothing and keeps the first .orig.
    path.write_text(path.read_text() + line("c", 1.0))
    assert set(resume_trajectories(path, ["a", "b", "c", "d"])) == {"a", "b", "c"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sample.rank0.jsonl", "sample.rank0.jsonl.orig"]
    # Cut off again mid-line: the next copy goes beside, the first stays.
    path.write_text(path.read_text() + "{not json\n")
    assert set(resume_trajectories(path, ["a", "b", "c", "d"])) == {"a", "b", "c"}
    assert (tmp_path / "sample.rank0.jsonl.orig").read_text() == original
    assert (tmp_path / "sample.rank0.jsonl.orig2").read_text().endswith("{not json\n")


def test_no_file_is_nothing_sampled_yet(tmp_path):
    assert resume_trajectories(tmp_path / "sample.rank0.jsonl", ["a"]) == {}
    assert list(tmp_path.iterdir()) == []


def test_a_file_every_batch_shares_keeps_the_other_batches_rows(tmp_path):
    """A PPO stage's train.jsonl holds every step's batch: resuming step 1 takes its finished
    episode and leaves step 0's rows in place; the line cut off mid-write and a repeat of a wanted
    id go (the file as it was kept beside)."""
    path = tmp_path / "train.jsonl"
    earlier = line("train-s000000-r0-0000-t", 1.0) + line("train-s000000-r0-0001-u", 2.0)
    original = earlier + line("train-s000001-r0-0000-t", 3.0) + line("train-s000001-r0-0000-t", -1.0) + '{"epis'
    path.write_text(original)
    wanted = ["train-s000001-r0-0000-t", "train-s000001-r0-0001-u"]
    found = resume_trajectories(path, wanted, shared=True)
    assert {eid: row["reward"] for eid, row in found.items()} == {"train-s000001-r0-0000-t": 3.0}
    assert path.read_text() == earlier + line("train-s000001-r0-0000-t", 3.0)
    assert (tmp_path / "train.jsonl.orig").read_text() == original
    # Not shared (a sampling batch's own file): the other batch's rows would go too.
    path.write_text(original)
    resume_trajectories(path, wanted)
    assert path.read_text() == line("train-s000001-r0-0000-t", 3.0)


def test_a_rank_reading_a_shared_file_leaves_it_as_it_is(tmp_path):
    path = tmp_path / "val.jsonl"
    original = line("val-s000000-r1-0000-t", 1.0) + '{"cut'
    path.write_text(original)
    assert set(resume_trajectories(path, ["val-s000000-r1-0000-t"], shared=True, tidy=False)) == {
        "val-s000000-r1-0000-t"}
    assert path.read_text() == original and list(tmp_path.iterdir()) == [path]
