"""Reading problems in KernelBench's layout, and the errors for a wrong root or selection."""
from pathlib import Path

import pytest

from src.evaluation.kernelbench import BenchmarkError, load_problems

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kernelbench_sample"
TASK = "import torch\nclass Model(torch.nn.Module):\n    pass\ndef get_inputs():\n    return []\n" \
       "def get_init_inputs():\n    return []\n"


def make_benchmark(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_sample_benchmark_has_three_levels_in_kernelbench_layout():
    problems = load_problems(SAMPLE, [1, 2, 3])
    assert [(p.level, p.problem_id, p.name) for p in problems] == [
        (1, 1, "ReLU"), (1, 2, "Leaky_ReLU"), (1, 3, "Row_Softmax"),
        (2, 1, "Add_ReLU"), (2, 2, "Residual_ReLU_Chain"), (2, 3, "Scale_Shift_Tanh"),
        (3, 1, "Tiny_MLP"), (3, 2, "Residual_MLP_Block")]
    assert all(p.path.is_file() and p.path.is_absolute() for p in problems)
    assert problems[0].id == "level1/1"


def test_problems_sort_by_number_not_text(tmp_path):
    root = make_benchmark(tmp_path, {"level1/10_Ten.py": TASK, "level1/9_Nine.py": TASK, "level1/notes.txt": ""})
    assert [p.problem_id for p in load_problems(root, [1])] == [9, 10]


def test_problem_id_selection(tmp_path):
    assert [p.key for p in load_problems(SAMPLE, [1, 2], [2])] == [(1, 2), (2, 2)]
    with pytest.raises(BenchmarkError, match=r"problem ids \[7\]"):
        load_problems(SAMPLE, [1], [1, 7])


def test_root_that_does_not_exist(tmp_path):
    with pytest.raises(BenchmarkError, match="is not a directory"):
        load_problems(tmp_path / "nowhere", [1])


def test_root_without_the_level_directory(tmp_path):
    root = make_benchmark(tmp_path, {"level1/1_A.py": TASK})
    with pytest.raises(BenchmarkError, match=r"has no level2/ directory"):
        load_problems(root, [1, 2])


def test_level_without_problem_files(tmp_path):
    root = make_benchmark(tmp_path, {"level1/README.md": "no problems here"})
    with pytest.raises(BenchmarkError, match=r"holds no \{id\}_\{name\}\.py problem files"):
        load_problems(root, [1])


def test_two_problems_with_one_id(tmp_path):
    root = make_benchmark(tmp_path, {"level1/1_A.py": TASK, "level1/01_B.py": TASK})
    with pytest.raises(BenchmarkError, match="two problems with id 1"):
        load_problems(root, [1])


def test_a_checkouts_top_folder_is_accepted(tmp_path):
    make_benchmark(tmp_path, {"KernelBench/level1/1_A.py": TASK, "README.md": ""})
    assert [p.name for p in load_problems(tmp_path, [1])] == ["A"]


def test_no_levels(tmp_path):
    with pytest.raises(BenchmarkError, match="no benchmark levels"):
        load_problems(SAMPLE, [])
