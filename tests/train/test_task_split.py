"""The task set's split: a dataset's own split column (the family's, by chain signature) decides
which tasks train and which validate; a source without one is refused with a clear error."""
from __future__ import annotations

from pathlib import Path

import pytest

from src.data.tasks import TaskSetError, load_task_set, split_by_column

ROOT = Path(__file__).resolve().parents[2]
FAMILY = ROOT / "data" / "family" / "cpu" / "tasks.parquet"


def signatures() -> dict[str, str]:
    from data_gen.dataset import load_tasks

    return {row["id"]: row["signature"] for row in load_tasks(FAMILY)}


def test_the_family_split_column_keeps_held_out_chains_out_of_training(tmp_path):
    split = split_by_column(load_task_set(FAMILY, tmp_path, split_column="split"), val_max=0)
    assert (len(split.train), len(split.val)) == (145, 38)
    sig = signatures()
    assert not {sig[t.id] for t in split.train} & {sig[t.id] for t in split.val}  # by signature, not by sample


def test_a_task_limit_cuts_training_tasks_and_val_max_the_held_out_ones(tmp_path):
    split = split_by_column(load_task_set(FAMILY, tmp_path, limit=3, split_column="split"), val_max=2)
    assert (len(split.train), len(split.val)) == (3, 2)
    assert {t.split for t in split.train} == {"train"} and {t.split for t in split.val} == {"heldout"}


def test_a_split_column_the_source_lacks_is_one_clear_error(tmp_path):
    with pytest.raises(TaskSetError, match="no 'side' column"):
        load_task_set(FAMILY, tmp_path, split_column="side")
    with pytest.raises(TaskSetError, match="needs a .parquet"):
        load_task_set(ROOT / "examples" / "kernelbench_sample", tmp_path, split_column="split")
