"""Tests for static task and solution checks (sandbox.task, sandbox.solution) on files in tmp_path."""
import os

import pytest

from sandbox.errors import SolutionError, TaskError
from sandbox.solution import read_solution
from sandbox.task import check_solution_source, load_task_source

VALID_TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(4)]


def get_init_inputs():
    return []
"""

VALID_SOLUTION = """import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x * 2
"""


def assert_one_line(exc_info):
    msg = str(exc_info.value)
    assert msg
    assert "\n" not in msg
    assert "Traceback" not in msg
    return msg


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


# --- load_task_source --------------------------------------------------------------------------

def test_valid_task_returns_source(tmp_path):
    assert load_task_source(write(tmp_path / "task.py", VALID_TASK)) == VALID_TASK


def test_task_accepts_string_path(tmp_path):
    assert load_task_source(str(write(tmp_path / "task.py", VALID_TASK))) == VALID_TASK


def test_task_syntax_error_names_line(tmp_path):
    path = write(tmp_path / "task.py", "import torch\n\ndef get_inputs(:\n    pass\n")
    with pytest.raises(TaskError) as exc:
        load_task_source(path)
    msg = assert_one_line(exc)
    assert "syntax error" in msg and "line 3" in msg


def test_task_missing_get_init_inputs_is_named(tmp_path):
    path = write(tmp_path / "task.py", VALID_TASK.replace("def get_init_inputs", "def other_inputs"))
    with pytest.raises(TaskError) as exc:
        load_task_source(path)
    msg = assert_one_line(exc)
    assert "does not define get_init_inputs" in msg


def test_task_missing_model_and_get_inputs_names_both(tmp_path):
    path = write(tmp_path / "task.py", "def get_init_inputs():\n    return []\n")
    with pytest.raises(TaskError) as exc:
        load_task_source(path)
    assert "does not define Model, get_inputs " in assert_one_line(exc)


def test_task_names_bound_by_assignment_and_import_count(tmp_path):
    source = "from mod import Model\nget_inputs = lambda: []\nget_init_inputs: object = list\n"
    assert load_task_source(write(tmp_path / "task.py", source)) == source


def test_task_name_defined_only_inside_function_does_not_count(tmp_path):
    source = VALID_TASK.replace("def get_init_inputs():\n    return []\n",
                                "def helper():\n    def get_init_inputs():\n        return []\n")
    with pytest.raises(TaskError, match="get_init_inputs"):
        load_task_source(write(tmp_path / "task.py", source))


def test_task_non_utf8_mentions_utf8(tmp_path):
    path = tmp_path / "task.py"
    path.write_bytes(b"# caf\xe9\n" + VALID_TASK.encode())
    with pytest.raises(TaskError) as exc:
        load_task_source(path)
    msg = assert_one_line(exc)
    assert "UTF-8" in msg and "byte 5" in msg


def test_task_with_nul_byte_is_task_error(tmp_path):
    path = tmp_path / "task.py"
    path.write_bytes(VALID_TASK.encode() + b"\x00\n")
    with pytest.raises(TaskError) as exc:
        load_task_source(path)
    assert_one_line(exc)


def test_missing_task_file_raises(tmp_path):
    with pytest.raises(TaskError) as exc:
        load_task_source(tmp_path / "nope.py")
    assert "not found" in assert_one_line(exc)


def test_task_path_that_is_a_directory_raises(tmp_path):
    with pytest.raises(TaskError, match="not found"):
        load_task_source(tmp_path)


# --- check_solution_source ---------------------------------------------------------------------

def test_solution_without_modelnew_raises():
    with pytest.raises(SolutionError) as exc:
        check_solution_source(b"class Model:\n    pass\n", "solution s.py")
    assert assert_one_line(exc) == "solution s.py does not define ModelNew"


def test_solution_with_modelnew_returns_decoded_source():
    assert check_solution_source(VALID_SOLUTION.encode(), "x") == VALID_SOLUTION


def test_solution_syntax_error_is_solution_error_not_task_error():
    with pytest.raises(SolutionError) as exc:
        check_solution_source(b"class ModelNew(:\n", "solution s.py")
    assert not isinstance(exc.value, TaskError)
    assert "line 1" in assert_one_line(exc)


def test_solution_non_utf8_is_solution_error():
    with pytest.raises(SolutionError, match="UTF-8"):
        check_solution_source(b"\xff\xfeModelNew = 1\n", "solution s.py")


# --- read_solution -----------------------------------------------------------------------------

def test_single_file_solution(tmp_path):
    sol = read_solution(write(tmp_path / "sol.py", VALID_SOLUTION))
    assert sol.form == "single_file"
    assert sol.model_new_source == VALID_SOLUTION
    assert sol.kernel_files == {} and not sol.has_kernels


def test_missing_solution_path_raises(tmp_path):
    with pytest.raises(SolutionError) as exc:
        read_solution(tmp_path / "absent")
    assert "not found" in assert_one_line(exc)


def test_workspace_without_model_new_raises(tmp_path):
    (tmp_path / "kernels").mkdir()
    write(tmp_path / "kernels" / "k.cu", "// kernel\n")
    with pytest.raises(SolutionError) as exc:
        read_solution(tmp_path)
    assert "has no model_new.py" in assert_one_line(exc)


def test_workspace_model_new_without_modelnew_raises(tmp_path):
    write(tmp_path / "model_new.py", "x = 1\n")
    with pytest.raises(SolutionError) as exc:
        read_solution(tmp_path)
    assert "does not define ModelNew" in assert_one_line(exc)


def test_workspace_ignores_fixed_files_and_non_kernel_suffixes(tmp_path):
    write(tmp_path / "model_new.py", VALID_SOLUTION)
    kdir = tmp_path / "kernels"
    kdir.mkdir()
    write(kdir / "binding.cpp", "// a submitted copy of the fixed file\n")
    write(kdir / "binding_registry.h", "// fixed too\n")
    write(kdir / "notes.txt", "not a kernel\n")
    write(kdir / "add.cu", "extern \"C\" void add() {}\n")
    write(kdir / "add.cuh", "#pragma once\n")
    sol = read_solution(tmp_path)
    assert sol.form == "workspace"
    assert sorted(sol.kernel_files) == ["add.cu", "add.cuh"]
    assert sol.kernel_files["add.cu"] == b"extern \"C\" void add() {}\n"
    assert sol.has_kernels


def test_workspace_with_only_fixed_binding_has_no_kernels(tmp_path):
    write(tmp_path / "model_new.py", VALID_SOLUTION)
    (tmp_path / "kernels").mkdir()
    write(tmp_path / "kernels" / "binding.cpp", "// ignored\n")
    sol = read_solution(tmp_path)
    assert sol.kernel_files == {} and not sol.has_kernels


def test_workspace_with_headers_only_has_no_kernels(tmp_path):
    write(tmp_path / "model_new.py", VALID_SOLUTION)
    (tmp_path / "kernels").mkdir()
    write(tmp_path / "kernels" / "util.h", "#pragma once\n")
    sol = read_solution(tmp_path)
    assert list(sol.kernel_files) == ["util.h"] and not sol.has_kernels


def test_workspace_symlink_kernel_raises(tmp_path):
    write(tmp_path / "model_new.py", VALID_SOLUTION)
    outside = write(tmp_path / "secret.cu", "// outside the kernels dir\n")
    (tmp_path / "kernels").mkdir()
    os.symlink(outside, tmp_path / "kernels" / "k.cu")
    with pytest.raises(SolutionError) as exc:
        read_solution(tmp_path)
    assert "k.cu is not a regular file" in assert_one_line(exc)


def test_workspace_directory_with_kernel_suffix_raises(tmp_path):
    write(tmp_path / "model_new.py", VALID_SOLUTION)
    (tmp_path / "kernels" / "dir.cu").mkdir(parents=True)
    with pytest.raises(SolutionError, match="not a regular file"):
        read_solution(tmp_path)
