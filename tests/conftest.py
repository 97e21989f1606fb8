"""Shared test support: GPU skips, a per-session sandbox cache and a runner for the CLI.

End-to-end tests run ``python -m sandbox evaluate ...`` in a subprocess (real worker
processes, a real compiler) against one cache directory per test session, so workspace
objects, load_inline builds and baseline timings are built once and reused.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, NamedTuple, Optional

import pytest

from sandbox.gate import GATE_DIR_ENV
from src.entry import register_resolvers

# Tests compose the Hydra configs directly: they need the resolvers the entry scripts register.
register_resolvers()

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = REPO_ROOT / "examples"
EXAMPLE_TASKS = EXAMPLES / "tasks"
CPU_SOLUTIONS = EXAMPLES / "solutions" / "cpu"
CUDA_SOLUTIONS = EXAMPLES / "solutions" / "cuda"
RELU_ADD_TASK = EXAMPLE_TASKS / "relu_add.py"
LINEAR_RELU_TASK = EXAMPLE_TASKS / "linear_relu.py"

# Cheap timing defaults for every CLI evaluation (tests assert on verdicts, not on speed).
DEFAULT_CLI_ARGS = ("--backend", "cpu", "--warmup", "1", "--repeats", "3")
# Upper bound for one CLI call: a cold workspace build compiles torch headers (~30-60 s per
# file on a small machine) and may share the CPU with other work.
CLI_TIMEOUT_S = 420.0

# A relu_add task small enough that the reference, the baselines and a pure-Python
# ModelNew cost almost nothing. Its text is fixed, so its baselines are timed once per session.
SMALL_RELU_ADD_TASK = '''"""Test task: out = relu(a + b) on a few thousand floats."""
import torch
import torch.nn as nn

N = 4099


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.relu(a + b)


def get_inputs():
    return [torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return []
'''


# Whether the session was given its gate folder (read before pytest_configure sets one; an
# xdist worker inherits its controller's and reads True).
GATE_DIR_GIVEN = bool(os.environ.get(GATE_DIR_ENV))
_own_gate_dir: list = []  # the folder pytest_configure made, removed at the session's end


def pytest_configure(config: pytest.Config) -> None:
    """The suite's device gates (sandbox/gate.py) live in a folder of its own, unless
    CUDA_AGENT_GATE_DIR names one: a family pipeline or benchmark on the same machine holds the
    machine-wide CPU gate for minutes at a time, and tests queued behind it (one waited 20+
    minutes) instead of running. Tests assert verdicts, not speed; to have the suite wait for
    another job's timed sections anyway, set CUDA_AGENT_GATE_DIR to that job's folder. Set in
    the controlling process only, so pytest-xdist workers and the suite's subprocesses inherit
    one folder and still gate each other."""
    if not os.environ.get(GATE_DIR_ENV) and not os.environ.get("PYTEST_XDIST_WORKER"):
        import tempfile

        os.environ[GATE_DIR_ENV] = tempfile.mkdtemp(prefix="cuda-agent-test-gates-")
        _own_gate_dir.append(os.environ[GATE_DIR_ENV])


# A test process that hangs after its summary (seen once with pytest-xdist on the GPU host) says
# why: with CUDA_AGENT_TEST_EXIT_REPORT=PREFIX set, a process still alive EXIT_REPORT_AFTER_S after
# its session ended writes every thread's stack, and its live threads and descendants, to
# PREFIX.<xdist worker or "main">.txt.
EXIT_REPORT_AFTER_S = 60.0
_exit_report: list = []  # the open report file (faulthandler writes to it later)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _own_gate_dir:
        import shutil

        shutil.rmtree(_own_gate_dir.pop(), ignore_errors=True)
    prefix = os.environ.get("CUDA_AGENT_TEST_EXIT_REPORT")
    if not prefix:
        return
    import faulthandler
    import threading

    path = Path(f"{prefix}.{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.txt")
    path.parent.mkdir(parents=True, exist_ok=True)
    report = open(path, "w")
    threads = [f"{t.name} (daemon={t.daemon})" for t in threading.enumerate()]
    from sandbox.process import descendants

    report.write(f"pid {os.getpid()} at session end: threads {threads}; descendants {descendants(os.getpid())}\n"
                 f"stacks if still alive {EXIT_REPORT_AFTER_S:g} s later:\n")
    report.flush()
    _exit_report.append(report)
    faulthandler.dump_traceback_later(EXIT_REPORT_AFTER_S, file=report)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip tests marked ``gpu`` when no CUDA device is usable (the marker is in pyproject)."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in gpu_items:
        item.add_marker(skip)


class CliResult(NamedTuple):
    returncode: int
    stdout: str
    stderr: str
    data: Optional[dict]  # the parsed JSON object when --json was given and stdout is not empty


@pytest.fixture(scope="session")
def sandbox_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache root for the whole session (--cache-dir / SandboxConfig(cache_dir=...)).
    CUDA_AGENT_TEST_CACHE names a directory to reuse across local sessions (builds stay warm)."""
    reuse = os.environ.get("CUDA_AGENT_TEST_CACHE")
    if reuse:
        Path(reuse).mkdir(parents=True, exist_ok=True)
        return Path(reuse)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # Under pytest-xdist every worker has its own basetemp below one shared root: the cache
        # goes there, so the workers share builds (the cache's own locks keep them apart).
        shared = tmp_path_factory.getbasetemp().parent / "sandbox-cache"
        shared.mkdir(exist_ok=True)
        return shared
    return tmp_path_factory.mktemp("sandbox-cache")


@pytest.fixture(scope="session")
def load_script() -> Callable[[str], Any]:
    """Import a script of the repository (benchmarks/, scripts/: no packages) as a module, by its
    path from the repository root; registered in sys.modules, so its dataclasses find it."""
    import importlib.util

    def load(relative: str) -> Any:
        path = REPO_ROOT / relative
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture(scope="session")
def example_paths() -> SimpleNamespace:
    """The bundled examples (conftest is not importable under --import-mode=importlib)."""
    return SimpleNamespace(root=REPO_ROOT, examples=EXAMPLES, tasks=EXAMPLE_TASKS,
                           cpu_solutions=CPU_SOLUTIONS, cuda_solutions=CUDA_SOLUTIONS,
                           relu_add_task=RELU_ADD_TASK, linear_relu_task=LINEAR_RELU_TASK)


@pytest.fixture(scope="session")
def cli_env(sandbox_cache: Path) -> dict[str, str]:
    """Environment for sandbox subprocesses: the session cache is also the default cache."""
    env = dict(os.environ)
    env["CUDA_AGENT_CACHE"] = str(sandbox_cache)
    return env


@pytest.fixture(scope="session")
def run_sandbox(cli_env: dict[str, str]) -> Callable[..., CliResult]:
    """Run ``python -m sandbox ARGS...`` from the repository root; no defaults added."""

    def run(*args: Any, timeout: float = CLI_TIMEOUT_S, env: Optional[dict[str, str]] = None) -> CliResult:
        cmd = [sys.executable, "-m", "sandbox", *map(str, args)]
        try:
            proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env or cli_env, capture_output=True,
                                  text=True, errors="replace", timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"{' '.join(cmd)} did not finish within {timeout:g} s "
                        f"(stderr so far: {exc.stderr!r})")
        data = None
        if "--json" in cmd and proc.stdout.strip():
            try:
                data = json.loads(proc.stdout)  # the whole stdout: exactly one JSON value
            except ValueError as err:
                pytest.fail(f"stdout is not exactly one JSON object ({err}): {proc.stdout[:2000]!r}")
        return CliResult(proc.returncode, proc.stdout, proc.stderr, data)

    return run


@pytest.fixture(scope="session")
def run_cli(run_sandbox: Callable[..., CliResult], sandbox_cache: Path) -> Callable[..., CliResult]:
    """``python -m sandbox evaluate --task T --solution S --json --cache-dir C --backend cpu
    --warmup 1 --repeats 3 [extra...]``; ``extra`` comes last, so it overrides the defaults.
    ``task``/``solution`` of None leave the option out."""

    def run(task: Any, solution: Any, *extra: Any, json_output: bool = True,
            timeout: float = CLI_TIMEOUT_S) -> CliResult:
        args: list[Any] = ["evaluate"]
        if task is not None:
            args += ["--task", task]
        if solution is not None:
            args += ["--solution", solution]
        args += ["--cache-dir", sandbox_cache, *DEFAULT_CLI_ARGS]
        if json_output:
            args.append("--json")
        args += list(extra)
        return run_sandbox(*args, timeout=timeout)

    return run


@pytest.fixture(scope="session")
def small_task(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny relu_add task (same text all session, so its baselines are cached)."""
    path = tmp_path_factory.mktemp("tasks") / "small_relu_add.py"
    path.write_text(SMALL_RELU_ADD_TASK)
    return path


@pytest.fixture
def write_solution(tmp_path: Path) -> Callable[..., Path]:
    """Write a single-file solution (dedented source) into tmp_path and return its path."""

    def write(source: str, name: str = "model_new.py") -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
        return path

    return write


def relu_add_source(forward_body: str, preamble: str = "") -> str:
    """model_new.py of a pure-Python ModelNew for relu_add tasks whose forward(a, b) body is given."""
    body = textwrap.indent(textwrap.dedent(forward_body).strip("\n"), " " * 8)
    return ("import os\nimport signal\nimport sys\n\nimport torch\nimport torch.nn as nn\n\n"
            + textwrap.dedent(preamble).strip("\n") + "\n\n\n"
            "class ModelNew(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n\n"
            "    def forward(self, a, b):\n" + body + "\n")


@pytest.fixture(scope="session")
def relu_add_model_source() -> Callable[..., str]:
    """relu_add_source (conftest is not importable under --import-mode=importlib)."""
    return relu_add_source


@pytest.fixture
def relu_add_solution(write_solution: Callable[..., Path]) -> Callable[[str], Path]:
    """A pure-Python ModelNew for relu_add tasks whose forward(a, b) body is given."""

    def make(forward_body: str, preamble: str = "") -> Path:
        return write_solution(relu_add_source(forward_body, preamble))

    return make
