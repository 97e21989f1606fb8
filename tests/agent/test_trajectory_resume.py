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
