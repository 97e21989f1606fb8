"""The command line: unusable tasks and arguments exit 2 with one stderr line; results exit 0."""
from __future__ import annotations

import json

import pytest

VALID_TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.relu(a + b)


def get_inputs():
    return [torch.randn(64), torch.randn(64)]


def get_init_inputs():
    return []
'''

# name -> task file bytes (None: the task file does not exist)
MALFORMED_TASKS = {
    "syntax_error": VALID_TASK.replace("def get_inputs():", "def get_inputs(:").encode(),
    "missing_get_init_inputs": VALID_TASK.split("def get_init_inputs")[0].encode(),
    "non_utf8_bytes": VALID_TASK.encode().replace(b"import torch\n", b"import torch\n# caf\xe9\n", 1),
    "get_inputs_returns_a_string": VALID_TASK.replace("return [torch.randn(64), torch.randn(64)]",
                                                      'return "not a list"').encode(),
    "model_not_an_nn_module": VALID_TASK.replace("class Model(nn.Module):", "class Model:").replace(
        "        super().__init__()\n", "        pass\n").encode(),
    "get_inputs_raises": VALID_TASK.replace("return [torch.randn(64), torch.randn(64)]",
                                            'raise ValueError("no inputs today")').encode(),
    "task_file_missing": None,
}


@pytest.fixture
def valid_solution(relu_add_solution):
    return relu_add_solution("return torch.relu(a + b)")


def assert_usage_error(res) -> str:
    """Exit 2, nothing on stdout, exactly one 'error: ...' line on stderr; returns that line."""
    assert res.returncode == 2, (res.returncode, res.stdout[:500], res.stderr[-2000:])
    assert res.stdout == ""
    assert "Traceback" not in res.stderr, res.stderr[-2000:]
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].strip(), res.stderr[-2000:]
    assert lines[0].startswith("error:"), lines[0]
    return lines[0]


@pytest.mark.parametrize("name", list(MALFORMED_TASKS))
def test_malformed_task_exits_2_with_one_line(run_cli, tmp_path, valid_solution, name):
    task = tmp_path / "task.py"
    if MALFORMED_TASKS[name] is not None:
        task.write_bytes(MALFORMED_TASKS[name])
    assert_usage_error(run_cli(task, valid_solution, "--trials", "1"))


def test_cuda_backend_without_gpu_exits_2(run_cli, tmp_path, valid_solution):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is visible, so --backend cuda is usable here")
    task = tmp_path / "task.py"
    task.write_text(VALID_TASK)
    line = assert_usage_error(run_cli(task, valid_solution, "--backend", "cuda"))
    assert "cuda" in line.lower()


def test_a_solution_path_that_does_not_exist_is_a_usage_error(run_cli, tmp_path):
    task = tmp_path / "task.py"
    task.write_text(VALID_TASK)
    missing = tmp_path / "no_such_solution"
    line = assert_usage_error(run_cli(task, missing))
    assert line == f"error: --solution {missing}: no such file or directory"


def test_an_empty_solution_is_a_verdict_of_nothing_run(run_cli, tmp_path):
    task = tmp_path / "task.py"
    task.write_text(VALID_TASK)
    empty = tmp_path / "model_new.py"
    empty.write_text("")
    res = run_cli(task, empty)
    assert res.returncode == 0, res.stderr
    assert (res.data["error"], res.data["reward"], res.data["correct"]) == ("invalid_solution", -1.0, False)
    assert (res.data["stopped_after"], res.data["num_trials"], res.data["stage_seconds"]) == ("none", 0, {})


def test_help_says_what_it_does_and_what_each_choice_means(run_sandbox):
    top = run_sandbox("--help")
    assert top.returncode == 0 and top.stdout.splitlines()[2].startswith("The kernel sandbox from the shell")
    assert "python -m sandbox demo" in top.stdout
    ev = run_sandbox("evaluate", "--help").stdout
    for text in ("graduated: the paper's -1/1/2/3", "(default graduated)", "kernelbench: fp32 1e-4",
                 "(default kernelbench)", "timed runs (default 20)"):
        assert text in " ".join(ev.split()), text


def test_demo_prints_a_reward_line_and_warns_of_a_build_only_when_cold(run_sandbox, cli_env, tmp_path):
    from sandbox.__main__ import demo_needs_a_build, demo_paths
    from sandbox.config import SandboxConfig

    _, workspace = demo_paths("cpu")
    assert demo_needs_a_build(workspace, SandboxConfig(backend="cpu", cache_dir=str(tmp_path / "cold")))
    # The demo has no --cache-dir: CUDA_AGENT_CACHE (set to the session cache in cli_env) serves.
    res = run_sandbox("demo", "--backend", "cpu", env=cli_env)
    assert res.returncode == 0, res.stderr[-2000:]
    first = res.stdout.splitlines()[0] if res.stdout else ""
    assert first.startswith("reward"), res.stdout
    assert not demo_needs_a_build(workspace, SandboxConfig(backend="cpu", cache_dir=cli_env["CUDA_AGENT_CACHE"]))
    again = run_sandbox("demo", "--backend", "cpu", env=cli_env)
    assert again.returncode == 0 and again.stdout.startswith("reward"), again.stderr[-2000:]
    assert again.stderr.splitlines()[0] == ("judging relu_add_workspace on task relu_add.py on the cpu backend")


def test_baselines_times_every_task_once_and_resumes(run_sandbox, tmp_path):
    root = tmp_path / "bench" / "level1"
    root.mkdir(parents=True)
    (root / "1_relu_add.py").write_text(VALID_TASK)
    (root / "2_broken.py").write_bytes(MALFORMED_TASKS["get_inputs_raises"])
    out = tmp_path / "baselines.jsonl"
    args = ("baselines", "--benchmark-root", tmp_path / "bench", "--out", out, "--backend", "cpu",
            "--no-compile-baseline", "--warmup", "1", "--repeats", "3")
    first = run_sandbox(*args)
    assert first.returncode == 0, first.stderr[-2000:]
    rows = {row["id"]: row for row in map(json.loads, out.read_text().splitlines())}
    assert set(rows) == {"level1/1_relu_add.py", "level1/2_broken.py"}, rows
    assert rows["level1/1_relu_add.py"]["eager_us"] > 0 and "no inputs today" in rows["level1/2_broken.py"]["task_error"]
    again = run_sandbox(*args)
    assert again.returncode == 0 and "2 already in" in again.stderr and len(out.read_text().splitlines()) == 2
    missing = run_sandbox("baselines", "--benchmark-root", tmp_path / "nowhere", "--out", out, "--backend", "cpu")
    assert missing.returncode == 2 and "not a directory" in missing.stderr
