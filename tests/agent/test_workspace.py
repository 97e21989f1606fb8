"""The episode workspace: its layout, and that no file tool reaches outside it."""
import asyncio
import os

import pytest

from src.agent.tools import SandboxJudge, Toolbox
from src.agent.workspace import Workspace

TASK = "import torch\n\nclass Model(torch.nn.Module):\n    pass\n"


@pytest.fixture
def workspace(tmp_path):
    ws = Workspace.create(TASK, "cpu", parent=tmp_path / "episodes")
    yield ws
    ws.cleanup()


@pytest.fixture
def toolbox(workspace, tmp_path):
    # File tools never reach the judge; the pool is not needed for them.
    judge = SandboxJudge(pool=None, task=tmp_path / "task.py", snapshots=workspace.root / ".judged",
                         reward_name="graduated")
    return Toolbox(workspace, judge, ["list_files", "read_file", "write_file", "edit_file", "finish"])


def call(toolbox, name, **arguments):
    return asyncio.run(toolbox.call(name, arguments))


def test_layout_has_task_fixed_files_and_skill(workspace):
    names = set(os.listdir(workspace.root))
    assert {"model.py", "binding.cpp", "binding_registry.h", "SKILL.md", "kernels"} <= names
    assert (workspace.root / "model.py").read_text() == TASK
    skill = (workspace.root / "SKILL.md").read_text()
    assert "kernels/<name>.cpp" in skill and "{" not in skill.split("\n")[0]
    workspace.cleanup()
    assert not workspace.root.exists()


def test_write_read_edit_list_inside_the_workspace(toolbox, workspace):
    assert call(toolbox, "write_file", path="kernels/k.cpp", content="int a = 1;\n").ok
    assert call(toolbox, "edit_file", path="kernels/k.cpp", old_text="1", new_text="2").ok
    assert call(toolbox, "read_file", path="./kernels/k.cpp").text == "int a = 2;\n"
    assert "kernels/k.cpp" in call(toolbox, "list_files").text.splitlines()
    ambiguous = call(toolbox, "edit_file", path="kernels/k.cpp", old_text=" ", new_text="")
    assert not ambiguous.ok and "occurs 3 times" in ambiguous.text


@pytest.mark.parametrize("path", ["/etc/passwd", "../outside.txt", "kernels/../../outside.txt", "", "a\0b"])
def test_paths_out_of_the_workspace_are_refused(toolbox, path, tmp_path):
    for name, extra in (("read_file", {}), ("write_file", {"content": "x"})):
        result = call(toolbox, name, path=path, **extra)
        assert not result.ok and result.text.startswith("error:"), (name, path, result.text)
    assert not (tmp_path / "episodes" / "outside.txt").exists()


def test_symbolic_links_are_never_followed(toolbox, workspace, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("do not read")
    os.symlink(secret, workspace.root / "kernels" / "leak.cpp")
    os.symlink(tmp_path, workspace.root / "escape")
    for path in ("kernels/leak.cpp", "escape/secret.txt"):
        assert "symbolic link" in call(toolbox, "read_file", path=path).text
    assert "symbolic link" in call(toolbox, "write_file", path="kernels/leak.cpp", content="x").text
    assert secret.read_text() == "do not read"
    # A snapshot for the judge skips links too.
    assert "kernels/leak.cpp" not in workspace.solution_files()


def test_fixed_and_foreign_files_are_not_writable(toolbox, workspace):
    for path in ("binding.cpp", "kernels/binding.cpp", "binding_registry.h", "model.py", "SKILL.md",
                 "kernels/notes.txt", "utils/run.sh", "kernels/sub/k.cpp", "setup.py"):
        result = call(toolbox, "write_file", path=path, content="x")
        assert not result.ok, path
    assert (workspace.root / "model.py").read_text() == TASK


def test_bad_arguments_and_unknown_tools_are_observations(toolbox):
    assert "bad arguments" in call(toolbox, "read_file", file="model.py").text
    assert "unknown tool" in call(toolbox, "shell", cmd="ls /").text
    assert call(toolbox, "finish").finished
