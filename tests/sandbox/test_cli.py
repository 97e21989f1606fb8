"""The command line: unusable tasks and arguments exit 2 with one stderr line; results exit 0."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

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


@pytest.mark.parametrize("workers", ["1", "2"])
def test_baselines_on_the_cuda_backend_without_gpu_exit_2_and_record_nothing(run_sandbox, tmp_path, workers):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is visible, so --backend cuda is usable here")
    (tmp_path / "bench" / "level1").mkdir(parents=True)
    (tmp_path / "bench" / "level1" / "1_relu_add.py").write_text(VALID_TASK)
    out = tmp_path / "baselines.jsonl"
    res = run_sandbox("baselines", "--benchmark-root", tmp_path / "bench", "--out", out, "--backend", "cuda",
                      "--workers", workers)
    # A task error per task would be written as done, and a rerun on a GPU would skip every task.
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        "error: backend 'cuda' needs a CUDA GPU and a CUDA build of torch; none is visible here (use --backend cpu)"]
    assert not out.exists()


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


# Waits in get_init_inputs, i.e. in its reference run (a shared hold of the lane), until RELEASE
# exists: no other task can time meanwhile, so a run stops short of finishing while it waits.
WAITING_TASK = """import os
import time

RELEASE = {release!r}
""" + VALID_TASK.replace("def get_init_inputs():\n", """def get_init_inputs():
    deadline = time.monotonic() + 120
    while not os.path.exists(RELEASE) and time.monotonic() < deadline:
        time.sleep(0.05)
""")


def out_lines(out) -> list[str]:
    return out.read_text().splitlines() if out.exists() else []


def baselines_args(root, out, *extra) -> tuple:
    return ("baselines", "--benchmark-root", root, "--out", out, "--backend", "cpu", "--no-compile-baseline",
            "--warmup", "1", "--repeats", "3", *extra)


@pytest.fixture
def own_gates_env(cli_env, tmp_path) -> dict:
    """The CLI's environment with device gates of this test only (the machine's belong to others)."""
    return dict(cli_env, CUDA_AGENT_GATE_DIR=str(tmp_path / "gates"))


def test_baselines_with_two_workers_write_every_task_once_and_resume_after_an_interrupt(
        run_sandbox, own_gates_env, example_paths, tmp_path):
    root = tmp_path / "bench"
    (root / "level1").mkdir(parents=True)
    for i in (1, 2, 3):
        (root / "level1" / f"{i}_relu_add.py").write_text(VALID_TASK.replace("64", str(64 + i)))
    (root / "level1" / "4_waits.py").write_text(WAITING_TASK.format(release=str(tmp_path / "release")))
    out = tmp_path / "baselines.jsonl"
    args = baselines_args(root, out, "--workers", "2")
    # PYTHONFAULTHANDLER: a run that does not stop at Ctrl-C is aborted and prints where each thread was.
    # Ctrl-C at its default in the child: a suite started as a background job inherits SIGINT ignored.
    first = subprocess.Popen([sys.executable, "-m", "sandbox", *map(str, args)], cwd=example_paths.root,
                             env=dict(own_gates_env, PYTHONFAULTHANDLER="1"), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 180
        # Tasks 1-3 run beside the waiting one; at least two finish before it blocks the lane.
        while len(out_lines(out)) < 2 and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        first.send_signal(signal.SIGINT)
        try:
            code = first.wait(60)
        except subprocess.TimeoutExpired:
            first.send_signal(signal.SIGABRT)
            pytest.fail("the interrupted run was still running 60 s after Ctrl-C; its threads:\n"
                        + first.communicate(timeout=30)[1][-6000:])
        assert code == 130, first.stderr.read()[-2000:]
    finally:
        first.kill()
    before = out_lines(out)
    ids = [json.loads(line)["id"] for line in before]
    assert 2 <= len(before) <= 3 and "level1/4_waits.py" not in ids, before
    (tmp_path / "release").touch()
    again = run_sandbox(*args, env=own_gates_env)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"4 tasks, {len(before)} already in" in again.stderr
    after = out_lines(out)
    assert after[:len(before)] == before  # finished ids are not timed again
    rows = [json.loads(line) for line in after]
    assert sorted(r["id"] for r in rows) == [f"level1/{n}" for n in ("1_relu_add.py", "2_relu_add.py",
                                                                     "3_relu_add.py", "4_waits.py")]
    assert all(r["eager_us"] > 0 and r["compile_s"] is None for r in rows), rows


# Two tasks that meet. The company's reference worker holds a lock on LOCK for its whole life
# and waits (get_init_inputs) until the crowded task has looked; the crowded task's get_inputs,
# once the company has started, allocates 1 PiB on the host while that lock is held: the CPU
# allocator's real out-of-memory error. Alone (the company's worker gone), it runs as usual.
COMPANY_TASK = """import fcntl
import os
import time

MARKS = {marks!r}
held = []
""" + VALID_TASK.replace("def get_init_inputs():\n", """def get_init_inputs():
    held.append(open(os.path.join(MARKS, "lock"), "a"))  # kept open: locked until the worker ends
    fcntl.flock(held[0], fcntl.LOCK_EX)
    open(os.path.join(MARKS, "company_started"), "a").close()
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(MARKS, "looked")) and time.monotonic() < deadline:
        time.sleep(0.02)
""")
CROWDED_TASK = """import fcntl
import os
import time

MARKS = {marks!r}


def company_alive():
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(MARKS, "company_started")) and time.monotonic() < deadline:
        time.sleep(0.02)
    with open(os.path.join(MARKS, "lock"), "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
    return False
""" + VALID_TASK.replace("def get_inputs():\n", """def get_inputs():
    crowded = company_alive()
    open(os.path.join(MARKS, "looked"), "a").close()
    if crowded:
        open(os.path.join(MARKS, "ran_out"), "a").close()
        torch.empty(1 << 50, dtype=torch.uint8, device="cpu")
""")


def test_baselines_time_a_task_that_ran_out_of_memory_beside_another_again_alone(
        run_sandbox, own_gates_env, tmp_path):
    marks, root = tmp_path / "marks", tmp_path / "bench" / "level1"
    marks.mkdir()
    root.mkdir(parents=True)
    (root / "1_crowded.py").write_text(CROWDED_TASK.format(marks=str(marks)))
    (root / "2_company.py").write_text(COMPANY_TASK.format(marks=str(marks)))
    out = tmp_path / "baselines.jsonl"
    res = run_sandbox(*baselines_args(tmp_path / "bench", out, "--workers", "2"), env=own_gates_env)
    assert res.returncode == 0, res.stderr[-2000:]
    assert (marks / "ran_out").exists(), "the crowded task never met its company"
    rows = [json.loads(line) for line in out_lines(out)]
    assert [r["id"] for r in rows] == ["level1/2_company.py", "level1/1_crowded.py"], rows
    company, crowded = rows
    assert company["eager_us"] > 0 and "retried_alone" not in company, company
    assert crowded.get("retried_alone") is True and crowded.get("eager_us", 0) > 0, crowded
