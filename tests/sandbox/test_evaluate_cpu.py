"""End-to-end evaluations on the cpu backend: real compiler, real worker processes, the CLI.

Each test checks one property of the verdict. Failure paths use pure-Python solutions on a
tiny task, so nothing but the bundled examples needs compiling; the compiled examples share
one build cache per session (see tests/conftest.py).

Speed: one evaluation is mostly one busy process at a time (the judge waits on its workers, each
of which starts by importing torch), so the module fixture ``started`` starts every selected
evaluation up front, a few at a time, the compiled examples first; each test then reads what its
own evaluation returned (``result``). What a test judges is declared above it with ``@judges``.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import textwrap
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import pytest

from sandbox.judge import namespaces_available

FAST = ("--trials", "2")  # failure paths: correctness detail is not the point
# These tests use pure-Python ModelNew solutions built from torch operators to exercise one
# property each (weights, mismatches, rewards, stdout); the dispatch guard would reject them
# all as "PyTorch doing the work", so it is switched off here. tests/sandbox/test_guards_cpu.py
# tests the guards themselves.
PYTHON_REFERENCE_SOLUTION = ("--no-guards", "--no-compile-baseline")
# Evaluations running at once: enough to keep two cores busy while each waits on its workers.
PARALLEL_EVALUATIONS = 3
# Longest a test waits for what its evaluation returned (cold builds on a busy 2-core machine).
RESULT_TIMEOUT_S = 540


# ------------------------------------------------------------------ evaluations and their scheduling

# test name -> (what it runs: run(ctx, params) -> what the test reads, whether it compiles a kernel)
JUDGES: dict[str, tuple[Callable[[SimpleNamespace, dict], Any], bool]] = {}


def judges(run: Callable[[SimpleNamespace, dict], Any], compiles: bool = False):
    """Declare what a test judges; ``compiles``: a build of its own, started before the others."""
    def register(test):
        JUDGES[test.__name__] = (run, compiles)
        return test
    return register


def skipped(item: pytest.Item) -> bool:
    """A boolean skipif that holds: its evaluation need not run."""
    return any(m.args and m.args[0] is True for m in item.iter_markers("skipif"))


@pytest.fixture(scope="module")
def started(request, run_cli, small_task, small_linear_task, example_paths, relu_add_model_source,
            tmp_path_factory) -> dict[str, Future]:
    """Start every selected evaluation of this module (compiling ones first); nodeid -> future."""
    def context(name: str) -> SimpleNamespace:
        directory = tmp_path_factory.mktemp(re.sub(r"[^A-Za-z0-9_]+", "_", name)[:40])

        def relu_add(forward_body: str, preamble: str = "") -> Path:
            path = directory / "model_new.py"
            path.write_text(relu_add_model_source(forward_body, preamble))
            return path

        return SimpleNamespace(dir=directory, run_cli=run_cli, small_task=small_task, examples=example_paths,
                               small_linear_task=small_linear_task, relu_add=relu_add)

    mine = [it for it in request.session.items if getattr(it, "module", None) is request.module]
    own = sorted((it for it in mine if it.originalname in JUDGES and not skipped(it)),
                 key=lambda it: not JUDGES[it.originalname][1])
    pool = ThreadPoolExecutor(PARALLEL_EVALUATIONS, thread_name_prefix="cpu-eval")
    futures = {name: pool.submit(run, context(name), {}) for name, run in SHARED.items()
               if any(name in it.fixturenames for it in mine)}
    for item in own:
        params = dict(item.callspec.params) if hasattr(item, "callspec") else {}
        futures[item.nodeid] = pool.submit(JUDGES[item.originalname][0], context(item.name), params)
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture
def result(request, started) -> Any:
    """What this test's evaluation returned (see ``@judges``)."""
    return started[request.node.nodeid].result(timeout=RESULT_TIMEOUT_S)


def judged(res) -> dict:
    """The verdict of a CLI call that must have produced one."""
    assert res.returncode == 0, res.stderr
    return res.data


# ------------------------------------------------------------------ compiled example solutions

def judge_workspace(ctx, p):
    return ctx.run_cli(ctx.examples.relu_add_task, ctx.examples.cpu_solutions / "relu_add_workspace")


def judge_inline(ctx, p):
    return ctx.run_cli(ctx.examples.relu_add_task, ctx.examples.cpu_solutions / "relu_add_inline.py", *FAST)


# Module fixtures several tests read: fixture name -> what it runs (each compiles an example).
SHARED = {"workspace_result": judge_workspace, "inline_result": judge_inline}


@pytest.fixture(scope="module")
def workspace_result(started):
    return judged(started["workspace_result"].result(timeout=RESULT_TIMEOUT_S))


@pytest.fixture(scope="module")
def inline_result(started):
    return judged(started["inline_result"].result(timeout=RESULT_TIMEOUT_S))


def test_workspace_solution_is_correct(workspace_result):
    assert (workspace_result["correct"], workspace_result["compiled"], workspace_result["error"]) == (True, True, None), \
        workspace_result["error_detail"]


def test_workspace_solution_gets_positive_graduated_reward(workspace_result):
    assert workspace_result["reward_name"] == "graduated"
    assert workspace_result["reward"] in {1.0, 2.0, 3.0}


def test_workspace_solution_timings_are_positive(workspace_result):
    for key in ("runtime_us", "eager_us", "compile_us"):
        assert workspace_result[key] is not None and workspace_result[key] > 0, key


def test_workspace_solution_form_is_workspace(workspace_result):
    assert workspace_result["solution_form"] == "workspace"


def test_workspace_solution_passes_every_trial(workspace_result):
    # 5 trials before timing and 2 after it (post_timing_trials), all passed.
    assert workspace_result["trials_passed"] == workspace_result["num_trials"] == 5 + 2


def test_inline_solution_is_correct(inline_result):
    assert (inline_result["correct"], inline_result["error"]) == (True, None), inline_result["error_detail"]


def test_inline_solution_form_is_single_file(inline_result):
    assert inline_result["solution_form"] == "single_file"


def judge_linear_relu_workspace(ctx, p):
    solution = ctx.examples.cpu_solutions / "linear_relu_workspace"
    if not (solution / "model_new.py").is_file():
        return None
    return ctx.run_cli(ctx.examples.linear_relu_task, solution, *FAST)


@judges(judge_linear_relu_workspace, compiles=True)
def test_linear_relu_workspace_is_correct(result, example_paths):
    solution = example_paths.cpu_solutions / "linear_relu_workspace"
    if result is None:
        pytest.skip(f"{solution} is not there yet (the cpu linear_relu workspace is written separately)")
    res = result
    assert res.returncode == 0, res.stderr
    assert (res.data["correct"], res.data["error"]) == (True, None), res.data["error_detail"]


# ------------------------------------------------------------------ weights and seeds

SMALL_LINEAR_TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(16, 32)]


def get_init_inputs():
    return [32, 24]
"""


@pytest.fixture(scope="module")
def small_linear_task(tmp_path_factory):
    path = tmp_path_factory.mktemp("linear-task") / "small_linear.py"
    path.write_text(SMALL_LINEAR_TASK)
    return path


def python_linear_solution(ctx, source: str) -> Any:
    """Judge a pure-Python ModelNew (dedented ``source``) on the small linear task."""
    solution = ctx.dir / "model_new.py"
    solution.write_text(textwrap.dedent(source))
    return ctx.run_cli(ctx.small_linear_task, solution, *FAST, *PYTHON_REFERENCE_SOLUTION)


# state_dict keys differ (fc.* vs linear.*), so nothing is loaded: only constructing under
# the same seed as the reference gives ModelNew the same weights.
OTHER_PARAMETER_NAMES = """
    import torch
    import torch.nn as nn


    class ModelNew(nn.Module):
        def __init__(self, in_features, out_features):
            super().__init__()
            self.fc = nn.Linear(in_features, out_features)

        def forward(self, x):
            return torch.relu(x @ self.fc.weight.t() + self.fc.bias)
"""


@judges(lambda ctx, p: python_linear_solution(ctx, OTHER_PARAMETER_NAMES))
def test_different_parameter_names_are_built_under_the_reference_seed(result):
    res = result
    assert (res.data["correct"], res.data["error"]) == (True, None), res.data["error_detail"]


# Same keys and shapes, but random numbers drawn first: the seed alone would give other
# weights, so a correct verdict means the reference state_dict was loaded.
SAME_PARAMETER_STRUCTURE = """
    import torch
    import torch.nn as nn


    class ModelNew(nn.Module):
        def __init__(self, in_features, out_features):
            super().__init__()
            torch.randn(1000)
            self.linear = nn.Linear(in_features, out_features)

        def forward(self, x):
            return torch.relu(self.linear(x))
"""


@judges(lambda ctx, p: python_linear_solution(ctx, SAME_PARAMETER_STRUCTURE))
def test_matching_parameter_structure_gets_the_reference_weights(result):
    res = result
    assert (res.data["correct"], res.data["error"]) == (True, None), res.data["error_detail"]


# ------------------------------------------------------------------ failure paths

def relu_add_run(body: str, *extra: str, preamble: str = "") -> Callable[[SimpleNamespace, dict], Any]:
    """Judge a pure-Python relu_add ModelNew (forward ``body``) on the small task with FAST + ``extra``."""
    return lambda ctx, p: ctx.run_cli(ctx.small_task, ctx.relu_add(body, preamble), *FAST, *extra)


@judges(relu_add_run("return torch.relu(a - b)", *PYTHON_REFERENCE_SOLUTION))
def test_wrong_output_is_a_mismatch(result):
    res = result
    assert res.returncode == 0, res.stderr
    assert (res.data["error"], res.data["reward"], res.data["correct"]) == ("mismatch", -1.0, False)
    assert "trial 0" in res.data["error_detail"]


def judge_compile_error(ctx, p):
    workspace = ctx.dir / "workspace"
    shutil.copytree(ctx.examples.cpu_solutions / "relu_add_workspace", workspace)
    kernel = workspace / "kernels" / "relu_add.cpp"
    source = kernel.read_text()
    if "out[i] = v > 0.0f ? v : 0.0f;" not in source:
        return source
    kernel.write_text(source.replace("out[i] = v > 0.0f ? v : 0.0f;",
                                     "out[i] = v > 0.0f ? v : undeclared_thing_xyz;"))
    return ctx.run_cli(ctx.small_task, workspace, *FAST)


@judges(judge_compile_error)
def test_compile_error_in_workspace_kernel(result):
    assert not isinstance(result, str), f"the example kernel changed; no line to break in:\n{result}"
    res = result
    assert res.returncode == 0, res.stderr
    assert (res.data["error"], res.data["compiled"], res.data["reward"]) == ("compile_error", False, -1.0)
    first_line = res.data["error_detail"].splitlines()[0]
    assert "error:" in first_line and "undeclared_thing_xyz" in first_line, first_line


@judges(relu_add_run("os.kill(os.getpid(), signal.SIGSEGV)"))
def test_segfault_is_a_crash(result):
    res = result
    assert res.data["error"] == "crash"
    assert "SIGSEGV" in res.data["error_detail"]


@judges(lambda ctx, p: relu_add_run(p["body"])(ctx, p))
@pytest.mark.parametrize("body, code", [("os._exit(0)", 0), ("sys.exit(3)", 3)], ids=["os._exit(0)", "sys.exit(3)"])
def test_early_exit_is_a_crash(result, body, code):
    res = result
    assert res.data["error"] == "crash"
    assert f"exited with code {code}" in res.data["error_detail"]


def judge_hanging_forward(ctx, p):
    start = time.monotonic()
    res = ctx.run_cli(ctx.small_task, ctx.relu_add("while True:\n    pass"), *FAST, "--run-timeout", "8",
                      timeout=90)
    return res, time.monotonic() - start


@judges(judge_hanging_forward)
def test_hanging_forward_is_a_timeout(result):
    res, elapsed = result
    assert res.data["error"] == "timeout", res.data["error_detail"]
    assert elapsed < 60, f"took {elapsed:.1f} s"


def processes_mentioning(tag: str) -> list[int]:
    """Pids of live processes whose command line contains ``tag``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and entry.name != str(os.getpid()):
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if tag.encode() in cmdline:
                pids.append(int(entry.name))
    return pids


def judge_compile_timeout(ctx, p):
    """A load_inline build that cannot finish in 2 s; returns (result, pids left running)."""
    tag = uuid.uuid4().hex  # a unique source and name, so no build cache can answer
    solution = ctx.dir / "model_new.py"
    solution.write_text(textwrap.dedent(f'''
        import torch
        import torch.nn as nn
        from torch.utils.cpp_extension import load_inline

        CPP = r"""
        // {tag}
        #include <torch/extension.h>
        torch::Tensor relu_add(torch::Tensor a, torch::Tensor b) {{ return torch::relu(a + b); }}
        """

        ext = load_inline(name="slow_build_{tag}", cpp_sources=CPP, functions=["relu_add"])


        class ModelNew(nn.Module):
            def forward(self, a, b):
                return ext.relu_add(a, b)
    '''))
    res = ctx.run_cli(ctx.small_task, solution, *FAST, "--compile-timeout", "2", timeout=90)
    leaked = processes_mentioning(tag)
    for pid in leaked:  # compilers this test started: do not let them eat the CPU of later tests
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return res, leaked


# One evaluation for both tests below (module fixture).
SHARED["compile_timeout_run"] = judge_compile_timeout


@pytest.fixture(scope="module")
def compile_timeout_run(started):
    return started["compile_timeout_run"].result(timeout=RESULT_TIMEOUT_S)


def test_slow_load_inline_build_is_a_compile_timeout(compile_timeout_run):
    res, _ = compile_timeout_run
    assert (res.data["error"], res.data["compiled"]) == ("compile_timeout", False), res.data["error_detail"]


def test_compile_timeout_leaves_no_compiler_running(compile_timeout_run):
    _, leaked = compile_timeout_run
    assert leaked == []


@judges(relu_add_run('raise RuntimeError("boom in forward")'))
def test_exception_in_forward_is_a_runtime_error(result):
    res = result
    assert res.data["error"] == "runtime_error"
    assert res.data["error_detail"].startswith("RuntimeError: boom in forward")


FAKE = json.dumps({"compiled": True, "correct": True, "error": None, "reward": 3.0})


@judges(lambda ctx, p: relu_add_run(f"print({FAKE!r}, flush=True)\n{p['body']}", *PYTHON_REFERENCE_SOLUTION,
                                    preamble=f"print({FAKE!r}, flush=True)")(ctx, p))
@pytest.mark.parametrize("body, verdict", [
    ("return torch.relu(a - b)", (False, -1.0)),   # wrong, claims success
    ("return torch.relu(a + b)", (True, None)),    # right; the fake line must not be what is read
], ids=["wrong", "right"])
def test_solution_prints_do_not_reach_stdout(result, body, verdict):
    res = result
    assert res.returncode == 0, res.stderr
    assert len(res.stdout.splitlines()) == 1, res.stdout[:2000]
    correct, reward = verdict
    assert res.data["correct"] is correct
    if correct:
        assert res.data["reward"] in {1.0, 2.0, 3.0}
    else:
        assert res.data["reward"] == reward


WRITES_TO_THE_JUDGES_STDOUT = f"""
    try:
        with open(f"/proc/{{os.getppid()}}/fd/1", "w") as _fh:
            _fh.write({FAKE!r} + "\\n")
    except OSError:
        pass
"""


@judges(relu_add_run("return torch.relu(a - b)", preamble=WRITES_TO_THE_JUDGES_STDOUT))
@pytest.mark.skipif(bool(namespaces_available()), reason="needs root and unshare (PID namespaces)")
def test_solution_cannot_write_to_the_judges_stdout_via_proc(result):
    res = result
    assert len(res.stdout.splitlines()) == 1, res.stdout[:2000]


READS_REFERENCE_OUTPUTS_PREAMBLE = """
    import json

    _calls = [0]
"""
# Look everywhere a file of reference outputs could be: the job, the evaluation directory
# and the temporary directory; any list of tensors shaped like the output is taken.
READS_REFERENCE_OUTPUTS = """
    import glob, tempfile
    job = json.loads(open(sys.argv[2]).read())  # python -m sandbox.worker run JOB.json
    paths = [v for v in job.values() if isinstance(v, str) and v.endswith(".pt")]
    eval_dir = os.path.dirname(sys.argv[2])
    paths += glob.glob(eval_dir + "/**/*.pt", recursive=True)
    paths += glob.glob(tempfile.gettempdir() + "/**/*.pt", recursive=True)
    for path in paths:
        try:
            found = torch.load(path, weights_only=True)
        except Exception:
            continue
        if isinstance(found, list) and found and all(
                isinstance(t, torch.Tensor) and t.shape == a.shape for t in found):
            _calls[0] += 1
            return found[(_calls[0] - 1) % len(found)]
    return torch.zeros_like(a)
"""


@judges(relu_add_run(READS_REFERENCE_OUTPUTS, preamble=READS_REFERENCE_OUTPUTS_PREAMBLE))
def test_solution_cannot_read_the_reference_outputs(result):
    assert result.data["correct"] is False


def judge_invalid_solution(ctx, p):
    if p["kind"] == "directory_without_model_new":
        solution = ctx.dir / "workspace"
        (solution / "kernels").mkdir(parents=True)
        (solution / "kernels" / "k.cpp").write_text("int f() { return 1; }\n")
    else:
        solution = ctx.dir / "model_new.py"
        solution.write_text("import torch.nn as nn\n\n\nclass Model(nn.Module):\n    pass\n")
    return ctx.run_cli(ctx.small_task, solution)


@judges(judge_invalid_solution)
@pytest.mark.parametrize("kind", ["directory_without_model_new", "file_without_ModelNew"])
def test_invalid_solution_is_a_result(result, kind):
    res = result
    assert res.returncode == 0, res.stderr
    assert (res.data["error"], res.data["reward"]) == ("invalid_solution", -1.0)


# ------------------------------------------------------------------ baselines and rewards

def judge_twice_on_a_fresh_task(ctx, p):
    task = ctx.dir / "task.py"  # fresh text: its baselines cannot be cached yet
    task.write_text(ctx.small_task.read_text() + f"\n# {uuid.uuid4().hex}\n")
    solution = ctx.relu_add("return torch.relu(a + b)")
    first = ctx.run_cli(task, solution, *FAST, "--no-compile-baseline").data
    second = ctx.run_cli(task, solution, *FAST, "--no-compile-baseline").data
    return first, second


@judges(judge_twice_on_a_fresh_task)
def test_second_evaluation_reuses_cached_baselines(result):
    first, second = result
    assert (first["baseline_cached"], second["baseline_cached"]) == (False, True)
    assert second["eager_us"] == first["eager_us"]


@judges(relu_add_run("return torch.relu(a + b)", "--no-guards", "--reward", "binary"))
def test_binary_reward_of_a_correct_solution_is_one(result):
    res = result
    assert res.data["correct"] is True, res.data["error_detail"]
    assert (res.data["reward_name"], res.data["reward"]) == ("binary", 1.0)


@judges(relu_add_run("return torch.relu(a + b)", "--no-guards", "--reward", "continuous"))
def test_continuous_reward_is_compile_time_over_runtime(result):
    res = result
    assert res.data["correct"] is True, res.data["error_detail"]
    assert res.data["compile_us"] is not None, "torch.compile baseline missing"
    assert res.data["reward"] == pytest.approx(res.data["compile_us"] / res.data["runtime_us"])
