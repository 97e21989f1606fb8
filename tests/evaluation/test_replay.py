"""Replayed solutions: a benchmark-shaped directory or a JSONL release, mapped onto problems."""
import json
from pathlib import Path

import pytest

from src.evaluation.kernelbench import load_problems
from src.evaluation.replay import ReplayError, replay_solutions, solutions_from_dir

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "kernelbench_sample"
CPU_SOLUTIONS = REPO / "examples" / "kernelbench_sample_solutions" / "cpu"
CUDA_SOLUTIONS = REPO / "examples" / "kernelbench_sample_solutions" / "cuda"
CODE = "import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    pass\n"


@pytest.fixture(scope="module")
def problems():
    return load_problems(SAMPLE, [1, 2, 3])


def write_jsonl(path: Path, records) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def test_directory_of_files_and_workspaces(problems, tmp_path):
    found = replay_solutions(CPU_SOLUTIONS, problems, tmp_path)
    names = {key: (path.name if path else None) for key, path in found.items()}
    assert names == {(1, 1): "1_ReLU", (1, 2): "2_Leaky_ReLU", (1, 3): "3_Row_Softmax.py",
                     (2, 1): "1_Add_ReLU", (2, 2): "2_Residual_ReLU_Chain", (2, 3): "3_Scale_Shift_Tanh",
                     (3, 1): None, (3, 2): "2_Residual_MLP_Block.py"}
    assert found[1, 1].is_dir() and found[1, 3].is_file()


def test_cuda_sample_solutions_cover_every_problem(problems, tmp_path):
    found = replay_solutions(CUDA_SOLUTIONS, problems, tmp_path)
    assert all(path is not None for path in found.values()), found


def test_bare_id_names_and_ignored_entries(tmp_path):
    (tmp_path / "level2" / "7").mkdir(parents=True)
    (tmp_path / "level2" / "8.py").write_text(CODE)
    (tmp_path / "level2" / "notes.md").write_text("")
    (tmp_path / "level2" / ".9_hidden.py").write_text(CODE)
    assert sorted(solutions_from_dir(tmp_path)) == [(2, 7), (2, 8)]


def test_two_solutions_for_one_problem(tmp_path):
    (tmp_path / "level1").mkdir()
    (tmp_path / "level1" / "4_A.py").write_text(CODE)
    (tmp_path / "level1" / "4").mkdir()
    with pytest.raises(ReplayError, match="two solutions for problem 4"):
        solutions_from_dir(tmp_path)


def test_directory_without_level_folders(problems, tmp_path):
    with pytest.raises(ReplayError, match=r"has no level\{L\}/ folders"):
        replay_solutions(tmp_path, problems, tmp_path / "work")


def test_source_that_does_not_exist(problems, tmp_path):
    with pytest.raises(ReplayError, match="not found"):
        replay_solutions(tmp_path / "missing.jsonl", problems, tmp_path)


def test_jsonl_codes_become_files_in_the_run_directory(problems, tmp_path):
    source = write_jsonl(tmp_path / "kernels.jsonl", [
        {"level_id": 1, "task_id": 2, "code": CODE, "model": "someone's"},
        {"level_id": "2", "task_id": "3", "code": CODE},
        {"level_id": 4, "task_id": 1, "code": CODE}])  # no such problem: ignored
    found = replay_solutions(source, problems, tmp_path / "run")
    assert found[1, 2] == (tmp_path / "run" / "level1" / "2.py").resolve()
    assert found[1, 2].read_text() == CODE and found[2, 3].read_text() == CODE
    assert sum(path is not None for path in found.values()) == 2


@pytest.mark.parametrize("line, message", [
    ("{not json", "kernels.jsonl:1: not a JSON object"),
    ('["a list"]', "not a JSON object"),
    ('{"level_id": 1, "code": "x"}', "missing field.* task_id"),
    ('{"level_id": "one", "task_id": 1, "code": "x"}', "must be integers"),
    ('{"level_id": 1, "task_id": 1, "code": 5}', "code must be a string"),
])
def test_bad_jsonl_lines_name_the_line(problems, tmp_path, line, message):
    source = write_jsonl(tmp_path / "kernels.jsonl", [line])
    with pytest.raises(ReplayError, match=message):
        replay_solutions(source, problems, tmp_path / "run")


def test_jsonl_with_two_solutions_for_one_task(problems, tmp_path):
    record = {"level_id": 1, "task_id": 1, "code": CODE}
    source = write_jsonl(tmp_path / "kernels.jsonl", [record, record])
    with pytest.raises(ReplayError, match=r"kernels.jsonl:2: a second solution for level 1 task 1"):
        replay_solutions(source, problems, tmp_path / "run")
