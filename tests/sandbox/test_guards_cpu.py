"""Adversarial tests of the sandbox guards on the cpu backend: one test per threat of the table in
docs/sandbox.md ("Guards (threat model)"), plus legitimate look-alikes that must pass.

Every test judges one solution end to end (real compiler, real worker processes). Kernel
variants are copies of examples/solutions/cpu/relu_add_workspace in which only
kernels/relu_add.cpp and/or model_new.py change: the binding file stays byte-identical, so its
torch-header object is compiled once per session and each variant costs a link.

Speed: a single evaluation is mostly process start-up (each worker imports torch), so the
evaluations of this module are all started up front, a few at a time, by the module fixture
``scheduler``; each test then asserts on its own verdict (``verdict`` fixture). Workspace
variants wait for one plain workspace build, so the torch-header objects are compiled once and
never concurrently. What each test judges is declared right above it with ``@evaluates(...)``.

The background-work guard compares the worker's CPU time with wall time, so it only sees
background threads when the worker gets CPU: with scheduler autogroups (one per session, and
every worker is a session of its own) a few other busy sessions can hold a worker below the
50 % threshold however many threads it runs. Those tests therefore run alone, after the others,
and a miss on a host loaded beyond its CPU count is reported as that known weakness (xfail).
"""
from __future__ import annotations

import ctypes.util
import os
import re
import resource
import shutil
import textwrap
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Optional

import pytest

from sandbox import SandboxConfig, TimingConfig, evaluate, reward_fn

# Same timing as the CLI runs of conftest (--warmup 1 --repeats 3): one baseline cache entry.
TIMING = TimingConfig(warmup=1, repeats=3)
# Evaluations running at once (the module's evaluations overlap process start-up and compiles).
PARALLEL_EVALUATIONS = 3
# Longest a test waits for its verdict (cold torch-header compiles on a busy 2-core machine).
VERDICT_TIMEOUT_S = 540
# The test process's own address-space cap, to check that no evaluation changed it.
RLIMIT_AS_AT_IMPORT = resource.getrlimit(resource.RLIMIT_AS)

TWO_D_TASK = '''"""Test task: out = relu(a + b) on a 2-D tensor (views have something to reshape)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.relu(a + b)


def get_inputs():
    return [torch.randn(61, 67), torch.randn(61, 67)]


def get_init_inputs():
    return []
'''

# The example kernel's loop, reused by the variants below.
CORRECT_LOOP = """
  for (int64_t i = 0; i < n; ++i) {
    const float v = a[i] + b[i];
    out[i] = v > 0.0f ? v : 0.0f;
  }
"""


def kernel_source(body: str, prelude: str = "") -> str:
    """A kernels/relu_add.cpp defining relu_add_launch (the symbol the fixed binding calls)."""
    return ("#include <cstdint>\n#include <cstring>\n#include <vector>\n\n" + textwrap.dedent(prelude).strip()
            + '\n\nextern "C" void relu_add_launch(const float* a, const float* b, float* out, int64_t n) {\n'
            + textwrap.dedent(body).strip("\n") + "\n}\n")


def workspace_model_new(forward: str = "return cuda_extension.relu_add(a.contiguous(), b.contiguous())",
                        preamble: str = "", docstring: str = "relu_add through the workspace kernel.") -> str:
    """model_new.py of a relu_add workspace: ``preamble`` runs at import, ``forward`` is the body."""
    return (f'"""{docstring}"""\n'
            "import torch\nimport torch.nn as nn\n\nimport cuda_extension\n\n"
            + textwrap.dedent(preamble).strip("\n") + "\n\n\n"
            "class ModelNew(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n\n"
            "    def forward(self, a, b):\n"
            + textwrap.indent(textwrap.dedent(forward).strip("\n"), " " * 8) + "\n")


def single_file_model_new(forward: str, preamble: str = "") -> str:
    """A pure-Python model_new.py (no kernels) whose forward(a, b) body is given."""
    return ("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
            + textwrap.dedent(preamble).strip("\n") + "\n\n\n"
            "class ModelNew(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.act = nn.ReLU()\n\n"
            "    def forward(self, a, b):\n"
            + textwrap.indent(textwrap.dedent(forward).strip("\n"), " " * 8) + "\n")


# ------------------------------------------------------------------ jobs and their scheduling

@dataclass
class Job:
    """One evaluation: in-process evaluate() with ``config`` overrides, or the CLI with ``cli``."""

    solution: Path
    task: Optional[Path] = None                 # default: the session's small relu_add task
    config: dict = field(default_factory=dict)  # SandboxConfig overrides
    cli: Optional[tuple] = None                 # extra CLI arguments: judge through `python -m sandbox`


@dataclass
class Spec:
    build: Callable[[SimpleNamespace, dict], Job]
    workspace: bool = False   # needs the shared build cache warm (waits for the plain workspace build)
    heavy: bool = False       # compiles a torch-header file of its own: started first
    after: Optional[str] = None  # name of the test whose evaluation must finish first (same objects)
    alone: bool = False       # runs after every other evaluation, one at a time (CPU-share sensitive)


SPECS: dict[str, Spec] = {}


def evaluates(build: Callable[[SimpleNamespace, dict], Job], *, workspace: bool = False, heavy: bool = False,
              after: Optional[str] = None, alone: bool = False):
    """Declare the evaluation a test asserts on: ``build(ctx, params)`` writes the solution."""
    def register(test):
        SPECS[test.__name__] = Spec(build, workspace or heavy or after is not None, heavy, after, alone)
        return test
    return register


def settled(futures: list[Future]) -> Future:
    """A future that succeeds once every one of ``futures`` is done, whatever their outcome."""
    gate: Future = Future()
    remaining = [len(futures)]
    lock = threading.Lock()

    def one_done(_) -> None:
        with lock:
            remaining[0] -= 1
            last = remaining[0] == 0
        if last:
            gate.set_result(None)

    if not futures:
        gate.set_result(None)
    for future in futures:
        future.add_done_callback(one_done)
    return gate


class Scheduler:
    """Runs the module's evaluations in a small thread pool, respecting build dependencies."""

    def __init__(self, run_job: Callable[[Job], dict], workers: int):
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="guards-eval")
        self.run_job = run_job
        self.futures: dict[str, Future] = {}

    def add(self, key: str, make_job: Callable[[], Job], after: Optional[Future] = None) -> Future:
        future: Future = Future()
        self.futures[key] = future

        def start(_=None) -> None:
            if after is not None and after.exception() is not None:
                future.set_exception(RuntimeError(f"the evaluation this one waits for failed: {after.exception()!r}"))
                return
            self.pool.submit(self._run, future, make_job)

        if after is None:
            start()
        else:
            after.add_done_callback(start)
        return future

    def _run(self, future: Future, make_job: Callable[[], Job]) -> None:
        try:
            future.set_result(self.run_job(make_job()))
        except BaseException as exc:  # noqa: BLE001 - handed to the test that asks for it
            future.set_exception(exc)

    def result(self, key: str) -> dict:
        return self.futures[key].result(timeout=VERDICT_TIMEOUT_S)

    def close(self) -> None:
        for future in list(self.futures.values()):
            try:
                future.result(timeout=VERDICT_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - reported by the test that owns it
                pass
        self.pool.shutdown(wait=True, cancel_futures=True)


BASE_KEY = "plain relu_add workspace (paper tolerance)"
# Tests that read the plain workspace's verdict itself.
BASE_READERS = {"test_correct_kernel_passes_kernelbench_tolerance_under_paper"}


@pytest.fixture(scope="module")
def scheduler(request, tmp_path_factory, small_task, example_paths, sandbox_cache, run_cli):
    """Start every selected evaluation of this module; tests read their verdicts from it."""
    two_d_task = tmp_path_factory.mktemp("two-d-task") / "two_d_relu_add.py"
    two_d_task.write_text(TWO_D_TASK)

    def run_job(job: Job) -> dict:
        task = job.task or small_task
        if job.cli is not None:
            res = run_cli(task, job.solution, "--no-compile-baseline", *job.cli)
            assert res.returncode == 0 and res.data is not None, res.stderr[-3000:]
            return res.data
        cfg = SandboxConfig(backend="cpu", cache_dir=str(sandbox_cache), compile_baseline=False,
                            **{"timing": TIMING, **job.config})
        m = evaluate(task, job.solution, cfg)
        data = m.to_dict()
        data["reward"] = reward_fn("graduated")(m)
        return data

    sched = Scheduler(run_job, PARALLEL_EVALUATIONS)

    def context(name: str) -> SimpleNamespace:
        directory = tmp_path_factory.mktemp(re.sub(r"[^A-Za-z0-9_]+", "_", name)[:40])
        return SimpleNamespace(dir=directory, small_task=small_task, two_d_task=two_d_task, examples=example_paths)

    own = [it for it in request.session.items if getattr(it, "module", None) is request.module]
    specs = [(it, SPECS[it.originalname]) for it in own if it.originalname in SPECS]

    def job_maker(item, spec: Spec) -> Callable[[], Job]:
        ctx = context(item.name)
        params = dict(getattr(item, "callspec", None).params) if hasattr(item, "callspec") else {}
        return lambda: spec.build(ctx, params)

    base = None
    if any(spec.workspace for _, spec in specs) or any(it.originalname in BASE_READERS for it in own):
        base_ctx = context("base")
        base = sched.add(BASE_KEY, lambda: Job(copy_workspace(base_ctx), cli=("--tolerance", "paper")))
    first_of: dict[str, Future] = {}
    shared = [s for s in specs if not s[1].alone]
    ordered = ([s for s in shared if not s[1].workspace] + [s for s in shared if s[1].heavy]
               + [s for s in shared if s[1].workspace and not s[1].heavy and not s[1].after]
               + [s for s in shared if s[1].after and not s[1].heavy])
    for item, spec in ordered:
        after = base if spec.workspace else None
        if spec.after:
            after = first_of.get(spec.after, base)
        future = sched.add(item.nodeid, job_maker(item, spec), after)
        first_of.setdefault(item.originalname, future)
    gate = settled(list(sched.futures.values()))
    for item, spec in [s for s in specs if s[1].alone]:
        gate = settled([sched.add(item.nodeid, job_maker(item, spec), gate)])
    yield sched
    sched.close()


@pytest.fixture
def verdict(request, scheduler) -> dict:
    """The JSON-shaped verdict (Measurement.to_dict() plus the graduated reward) of this test."""
    return scheduler.result(request.node.nodeid)


def copy_workspace(ctx: SimpleNamespace, kernel: Optional[str] = None, model_new: Optional[str] = None,
                   binding: Optional[str] = None, name: str = "workspace") -> Path:
    """The cpu relu_add workspace example, with the given files replaced."""
    dest = ctx.dir / name
    shutil.copytree(ctx.examples.cpu_solutions / "relu_add_workspace", dest)
    for rel, text in (("kernels/relu_add.cpp", kernel), ("model_new.py", model_new),
                      ("kernels/relu_add_binding.cpp", binding)):
        if text is not None:
            (dest / rel).write_text(text)
    return dest


def single_file(ctx: SimpleNamespace, forward: str, preamble: str = "") -> Path:
    path = ctx.dir / "model_new.py"
    path.write_text(single_file_model_new(forward, preamble))
    return path


# ------------------------------------------------------------------ assertions

def describe(v: dict) -> str:
    run_log = (v.get("logs") or {}).get("run", "")[-1500:]
    return (f"error={v.get('error')!r} reward={v.get('reward')!r} correct={v.get('correct')!r}\n"
            f"violations={v.get('violations')!r}\ndetail={(v.get('error_detail') or '')[:2000]}\nrun log tail:\n{run_log}")


def assert_violation(v: dict, kind: str, *needles: str) -> list[str]:
    """Reward -1 with error "violation" and a violation of ``kind`` mentioning every needle."""
    assert (v["error"], v["reward"], v["correct"]) == ("violation", -1.0, False), describe(v)
    found = [x for x in v["violations"] if x.startswith(f"{kind}: ")]
    assert found, describe(v)
    for needle in needles:
        assert any(needle in x for x in found), f"no {kind} violation mentions {needle!r}\n{describe(v)}"
    assert v["error_detail"] and kind in v["error_detail"], describe(v)
    return found


def assert_failed(v: dict, error: str) -> None:
    assert (v["error"], v["reward"], v["correct"]) == (error, -1.0, False), describe(v)


def assert_passes(v: dict) -> None:
    assert (v["correct"], v["error"], v["violations"]) == (True, None, []), describe(v)
    assert v["compiled"] is True and v["reward"] >= 1.0, describe(v)
    assert v["runtime_us"] is not None and v["runtime_us"] > 0, describe(v)


# ================================================================== 1. PyTorch doing the work

TORCH_IN_FORWARD = {
    "functional": ("return F.relu(a + b)", "aten.relu"),
    "tensor_methods": ("return a.add(b).clamp_min(0)", "aten.clamp_min"),
    "module_forward": ("return self.act(a + b)", "aten.relu"),
    "torch_maximum": ("zeros = torch.zeros_like(a)\nreturn torch.maximum(a + b, zeros)", "aten.maximum"),
}


@evaluates(lambda ctx, p: Job(single_file(ctx, TORCH_IN_FORWARD[p["way"]][0])))
@pytest.mark.parametrize("way", list(TORCH_IN_FORWARD))
def test_pytorch_compute_in_forward_is_a_torch_op_violation(verdict, way):
    found = assert_violation(verdict, "torch_op", TORCH_IN_FORWARD[way][1])
    assert any("aten.add" in x for x in found), describe(verdict)  # a + b / a.add(b) too


ATEN_BINDING = """\
// The wrapper computes with ATen instead of calling the kernel.
#include "binding_registry.h"
#include <ATen/CPUFunctions.h>

extern "C" void relu_add_launch(const float* a, const float* b, float* out, int64_t n);

torch::Tensor relu_add(torch::Tensor a, torch::Tensor b) { return torch::relu(a + b); }

// The same through ATen's per-backend entry points, which do not go through the dispatcher.
torch::Tensor relu_add_direct(torch::Tensor a, torch::Tensor b) {
  return at::cpu::clamp_min(at::cpu::add(a, b), 0);
}

REGISTER_BINDING(relu_add, relu_add);
REGISTER_BINDING(relu_add_direct, relu_add_direct);
"""


@evaluates(lambda ctx, p: Job(copy_workspace(ctx, binding=ATEN_BINDING)), heavy=True)
def test_aten_compute_in_the_cpp_binding_is_a_torch_op_violation(verdict):
    assert verdict["compiled"] is True, describe(verdict)
    assert_violation(verdict, "torch_op", "aten.relu", "aten.add")


@evaluates(lambda ctx, p: Job(copy_workspace(ctx, binding=ATEN_BINDING, model_new=workspace_model_new(
    "return cuda_extension.relu_add_direct(a.contiguous(), b.contiguous())"))),
    after="test_aten_compute_in_the_cpp_binding_is_a_torch_op_violation")
def test_aten_kernels_called_around_the_dispatcher_are_linked_aten(verdict):
    # at::cpu:: functions run ATen's CPU kernels without the dispatcher: no recorder sees them,
    # the extension's imported symbols do.
    assert_violation(verdict, "linked_aten", "at::cpu::add", "at::cpu::clamp_min")


FALLBACK_FORWARD = """
try:
    # float64 is refused by the binding's TORCH_CHECK: the kernel path raises every time
    return cuda_extension.relu_add(a.double(), b.double()).float()
except RuntimeError:
    return torch.relu(a + b)
"""


@evaluates(lambda ctx, p: Job(copy_workspace(ctx, model_new=workspace_model_new(FALLBACK_FORWARD))), workspace=True)
def test_try_except_fallback_to_pytorch_is_a_torch_op_violation(verdict):
    assert_violation(verdict, "torch_op", "aten.relu", "aten.add")


DISABLED_MODES = {
    "_disable_current_modes": """
        from torch.utils._python_dispatch import _disable_current_modes
        with _disable_current_modes():
            return torch.relu(a + b)
    """,
    "_DisableTorchDispatch": """
        with torch._C._DisableTorchDispatch():
            return torch.relu(a + b)
    """,
}


@evaluates(lambda ctx, p: Job(single_file(ctx, DISABLED_MODES[p["switch"]])))
@pytest.mark.parametrize("switch", list(DISABLED_MODES))
def test_pytorch_compute_with_dispatch_modes_switched_off_is_a_torch_op_violation(verdict, switch):
    # The recorder is a RecordFunction callback, which switching dispatch modes off does not touch.
    assert_violation(verdict, "torch_op", "aten.relu")


# ================================================================== 2. other libraries

def unmapped_system_library() -> tuple[str, str]:
    """(soname, name stem) of a system library the harness does not map (libbz2 is: Python's
    bz2 module is imported with torch, so loading it again maps nothing new)."""
    try:
        with open("/proc/self/maps") as maps:
            mapped = {os.path.basename(line.split()[-1]) for line in maps if ".so" in line}
    except OSError:  # no /proc: the sandbox's library check is off too
        return "", ""
    for stem in ("sqlite3", "gdbm", "png16", "jpeg", "xml2"):
        soname = ctypes.util.find_library(stem)
        if soname and not any(m.startswith(f"lib{stem}.so") for m in mapped):
            return soname, stem
    return "", ""


LIBRARY_SONAME, LIBRARY_STEM = unmapped_system_library()
LIBRARY_PREAMBLE = f"""
import ctypes

_lib = ctypes.CDLL({LIBRARY_SONAME!r})  # someone else's code, mapped at import
"""
ALLOWED_WITH_LIBRARY = ("cublas", "cublasLt", "cudnn", LIBRARY_STEM)


@evaluates(lambda ctx, p: Job(copy_workspace(ctx, model_new=workspace_model_new(preamble=LIBRARY_PREAMBLE)),
                              config={"allowed_libraries": p["allowed"]}), workspace=True)
@pytest.mark.parametrize("allowed", [SandboxConfig.allowed_libraries, ALLOWED_WITH_LIBRARY],
                         ids=["default_allowlist", "library_allowed"])
def test_loading_a_library_is_a_violation_unless_allowed(verdict, allowed):
    if not LIBRARY_SONAME:
        pytest.skip("no /proc, or no system library that the harness leaves unmapped")
    if allowed == ALLOWED_WITH_LIBRARY:
        assert_passes(verdict)
    else:
        assert_violation(verdict, "library", f"lib{LIBRARY_STEM}")


# ================================================================== 3. caching and skipping

CACHE_BY_POINTER = kernel_source(prelude="""
    static const float* last_a = nullptr;
    static std::vector<float> last_out;
""", body="""
  if (a == last_a && (int64_t)last_out.size() == n) {  // "same input": hand back the last answer
    std::memcpy(out, last_out.data(), n * sizeof(float));
    return;
  }
""" + CORRECT_LOOP + """
  last_a = a;
  last_out.assign(out, out + n);
""")

CACHE_BY_SHAPE = kernel_source(prelude="""
    static int64_t last_n = -1;
    static std::vector<float> last_out;
""", body="""
  if (n == last_n) {  // "same problem": hand back the last answer
    std::memcpy(out, last_out.data(), n * sizeof(float));
    return;
  }
""" + CORRECT_LOOP + """
  last_n = n;
  last_out.assign(out, out + n);
""")

HONEST_FOR_FIVE_CALLS = kernel_source(prelude="static int64_t calls = 0;", body="""
  if (++calls > 5) return;  // the five verification trials, then nothing
""" + CORRECT_LOOP)


@evaluates(lambda ctx, p: Job(copy_workspace(ctx, kernel={"pointer": CACHE_BY_POINTER,
                                                           "shape": CACHE_BY_SHAPE}[p["key"]])), workspace=True)
@pytest.mark.parametrize("key", ["pointer", "shape"])
def test_output_cached_by_input_pointer_or_shape_is_a_mismatch(verdict, key):
    assert_failed(verdict, "mismatch")
    assert verdict["trials_passed"] == 1, describe(verdict)  # trial 0 computed; trial 1 was served stale


@evaluates(lambda ctx, p: Job(copy_workspace(ctx, kernel=HONEST_FOR_FIVE_CALLS),
                              config={"num_correct_trials": 5, "post_timing_trials": 2}), workspace=True)
def test_kernel_honest_only_for_the_first_calls_fails_after_timing(verdict):
    # A spot-checked timed run (if one was drawn) or else the first post-timing trial catches it.
    assert verdict["reward"] == -1.0 and verdict["correct"] is False, describe(verdict)
    if verdict["error"] == "violation":
        assert_violation(verdict, "timing_output_mismatch", "timed run")
    else:
        assert_failed(verdict, "mismatch")
        assert "after timing" in verdict["error_detail"], describe(verdict)
    assert verdict["trials_passed"] == 5, describe(verdict)
    assert verdict["runtime_us"] is None, describe(verdict)


# ================================================================== 4. unwritten outputs

NEVER_WRITES = kernel_source(body="""
  (void)a; (void)b; (void)out; (void)n;  // whatever the allocator left in `out` is the answer
""")


@evaluates(lambda ctx, p: Job(copy_workspace(ctx, kernel=NEVER_WRITES)), workspace=True)
def test_kernel_that_never_writes_its_output_is_a_mismatch(verdict):
    assert_failed(verdict, "mismatch")
    assert "trial 0" in verdict["error_detail"], describe(verdict)


# ================================================================== 5. judge tampering

PATCHED_COMPARISONS = """
import sandbox.compare
import torch.testing

_yes = lambda *args, **kwargs: True  # noqa: E731
torch.allclose = _yes
torch.equal = _yes
torch.testing.assert_close = _yes
torch.Tensor.allclose = _yes
sandbox.compare.compare_outputs = lambda *args, **kwargs: sandbox.compare.Comparison(True)
"""


@evaluates(lambda ctx, p: Job(single_file(ctx, "return a", PATCHED_COMPARISONS)))
def test_patched_comparison_functions_gain_nothing(verdict):
    assert_failed(verdict, "mismatch")
    assert verdict["violations"] == [], describe(verdict)  # an input returned: no op, no guard hit


REWRITTEN_REFERENCE = """
import model  # the task module, as the run worker loaded it

model.Model.forward = lambda self, a, b: a
"""


@evaluates(lambda ctx, p: Job(single_file(ctx, "return a", REWRITTEN_REFERENCE)))
def test_rewritten_reference_model_gains_nothing(verdict):
    assert_failed(verdict, "mismatch")


LYING_SUBCLASS = """
class AlwaysEqual(torch.Tensor):
    def __eq__(self, other):
        return True

    def allclose(self, *args, **kwargs):
        return True
"""


@evaluates(lambda ctx, p: Job(single_file(ctx, "return a.as_subclass(AlwaysEqual)", LYING_SUBCLASS)))
def test_tensor_subclass_output_is_a_mismatch(verdict):
    assert_failed(verdict, "mismatch")
    assert "AlwaysEqual" in verdict["error_detail"] and "plain torch.Tensor" in verdict["error_detail"], \
        describe(verdict)


BACKEND_FLAGS = {
    "allow_tf32": ("torch.backends.cuda.matmul.allow_tf32 = True", "torch.backends.cuda.matmul.allow_tf32"),
    "matmul_precision": ('torch.set_float32_matmul_precision("medium")', "torch.float32_matmul_precision"),
}


@evaluates(lambda ctx, p: Job(copy_workspace(ctx, model_new=workspace_model_new(
    preamble=BACKEND_FLAGS[p["flag"]][0]))), workspace=True)
@pytest.mark.parametrize("flag", list(BACKEND_FLAGS))
def test_changed_backend_flag_is_a_violation(verdict, flag):
    assert_violation(verdict, "backend_flag", BACKEND_FLAGS[flag][1])


# Clocks that run at half speed: every timed run would look twice as fast.
SLOW_CLOCKS = {
    "time.perf_counter": """
        import time

        _real_clock = time.perf_counter
        time.perf_counter = lambda: _real_clock() * 0.5
    """,
    "sandbox.timing._perf_counter": """
        import time

        import sandbox.timing

        _real_clock = time.perf_counter
        sandbox.timing._perf_counter = lambda: _real_clock() * 0.5
    """,
}


@evaluates(lambda ctx, p: Job(copy_workspace(ctx, model_new=workspace_model_new(
    preamble=SLOW_CLOCKS[p["clock"]]))), workspace=True)
@pytest.mark.parametrize("clock", list(SLOW_CLOCKS))
def test_replaced_clock_is_harness_tampering(verdict, clock):
    assert_violation(verdict, "harness_tampered", clock)


# In-process harness functions replaced by solution code: fake timing samples, honest kernel.
PATCHED_HARNESS = {
    "__main__.checked_calls": """
        import __main__

        __main__.checked_calls = lambda *args, **kwargs: None  # the verified trials, unchecked
    """,
    "sandbox.timing.timed_runs": """
        import sandbox.timing

        sandbox.timing.timed_runs = lambda call, cfg, after_timed=None: [0.001] * cfg.repeats
    """,
    "__main__.timed_runs": """
        import __main__

        __main__.timed_runs = lambda call, cfg, after_timed=None: [0.001] * cfg.repeats
    """,
    "sandbox.measurement.TimingStats.from_samples": """
        from sandbox.measurement import TimingStats

        _real = TimingStats.from_samples
        TimingStats.from_samples = classmethod(lambda cls, samples: _real([s / 100 for s in samples]))
    """,
}


@evaluates(lambda ctx, p: Job(copy_workspace(ctx, model_new=workspace_model_new(
    preamble=PATCHED_HARNESS[p["target"]]))), workspace=True)
@pytest.mark.parametrize("target", list(PATCHED_HARNESS))
def test_replaced_harness_function_is_harness_tampering(verdict, target):
    assert_violation(verdict, "harness_tampered", target)


# Result files written where the old protocol kept them: the judge reads reports from a pipe now.
FORGED_FILES = """
import json

for name, payload in {
    "timing.json": {"runtime": {"median_us": 0.001, "mean_us": 0.001, "std_us": 0.0, "min_us": 0.001,
                                "max_us": 0.001, "p25_us": 0.001, "p75_us": 0.001, "n": 3}, "violations": []},
    "outputs.json": {"weights_loaded": False, "violations": []},
}.items():
    with open(name, "w") as fh:
        json.dump(payload, fh)
"""


@evaluates(lambda ctx, p: Job(copy_workspace(ctx, model_new=workspace_model_new(preamble=FORGED_FILES))),
           workspace=True)
def test_forged_result_files_gain_nothing(verdict):
    assert_passes(verdict)
    assert verdict["runtime_us"] > 0.01, describe(verdict)  # measured, not the forged 0.001 us


# A forged report written straight into the judge's pipe (its fd number is in the job file): it
# cannot carry the nonce the judge sent, so the judge rejects it instead of believing it.
FORGED_REPORT = """
import json
import os

_role = os.path.basename(os.getcwd())  # each worker runs in <evaluation>/<role>, next to <role>.job.json
_fd = json.load(open(f"../{_role}.job.json"))["report_fd"]
_fake = {"runtime": {"median_us": 0.001, "mean_us": 0.001, "std_us": 0.0, "min_us": 0.001,
                     "max_us": 0.001, "p25_us": 0.001, "p75_us": 0.001, "n": 3}, "violations": []}
for phase in ("build", "outputs", "timing"):
    os.write(_fd, (json.dumps({"phase": phase, "nonce": "0" * 32, "payload": _fake}) + "\\n").encode())
"""


@evaluates(lambda ctx, p: Job(copy_workspace(ctx, model_new=workspace_model_new(preamble=FORGED_REPORT))),
           workspace=True)
def test_forged_report_in_the_judges_pipe_is_harness_tampering(verdict):
    assert_violation(verdict, "harness_tampered", "forged report")


# ================================================================== 6. timing games

# Work left running by the five verification calls (hashlib releases the GIL on large buffers:
# each thread keeps a core busy), stopped by the next call, so only the guard's check after the
# verification trials can see it.
BACKGROUND_THREADS = """
import hashlib
import threading
import time

_BLOCK = bytes(1 << 20)
_stop = threading.Event()
_calls = [0]


def _keep_working(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end and not _stop.is_set():
        hashlib.sha256(_BLOCK).digest()


def _leave_work_running():
    _calls[0] += 1
    if _calls[0] > 5:
        _stop.set()
        return
    for _ in range(2):
        threading.Thread(target=_keep_working, args=(3.0,), daemon=True).start()
"""
BACKGROUND_FORWARD = """
out = cuda_extension.relu_add(a.contiguous(), b.contiguous())
_leave_work_running()  # still computing after forward has returned
return out
"""


@evaluates(lambda ctx, p: Job(copy_workspace(ctx, model_new=workspace_model_new(
    BACKGROUND_FORWARD, preamble=BACKGROUND_THREADS))), workspace=True, alone=True)
def test_threads_left_working_after_forward_are_background_work(verdict):
    assert_background_work(verdict)


@evaluates(lambda ctx, p: Job(copy_workspace(ctx, model_new=workspace_model_new(
    BACKGROUND_FORWARD, preamble=BACKGROUND_THREADS + "\ntime.process_time = lambda: 0.0\n"))), workspace=True,
    alone=True)
def test_background_work_behind_a_frozen_process_clock_is_still_background_work(verdict):
    # The guard's clocks are bound before solution code runs: time.process_time = lambda: 0.0 hides nothing.
    assert_background_work(verdict)


def assert_background_work(v: dict) -> None:
    load, cpus = os.getloadavg()[0], os.cpu_count() or 1
    if v["error"] is None and load > cpus:
        # Known weakness: the guard needs > 50 % of a CPU for the worker; a busy host (other
        # sessions, e.g. parallel evaluations) can hold it below that whatever it leaves running.
        pytest.xfail(f"bug: background work missed with load {load:.1f} on {cpus} CPUs (the worker's CPU "
                     "share stayed under the 50 % threshold)")
    assert_violation(v, "background_work")


# Timing inputs come from the task's get_inputs() in the solution's own process.
TIMING_INPUT_TAMPERING = {
    "shrunk_size_constant": ("""
        import model  # the task module: get_inputs() reads its N

        model.N = 7
    """, "task_tampered: "),
    "frozen_random_inputs": ("""
        _randn = torch.randn
        _frozen = {}


        def _same_inputs_every_time(*size, **kwargs):
            key = repr((size, sorted(kwargs.items())))
            return _frozen.setdefault(key, _randn(*size, **kwargs)).clone()


        torch.randn = _same_inputs_every_time
    """, "torch.randn"),
}


@evaluates(lambda ctx, p: Job(copy_workspace(ctx, model_new=workspace_model_new(
    preamble=TIMING_INPUT_TAMPERING[p["way"]][0]))), workspace=True)
@pytest.mark.parametrize("way", list(TIMING_INPUT_TAMPERING))
def test_tampered_timing_inputs_are_task_tampering(verdict, way):
    assert_violation(verdict, "task_tampered", TIMING_INPUT_TAMPERING[way][1])


# ================================================================== 6b. timed runs told apart from verified ones
# Each adversary computes honestly while it believes it is verified and returns an uninitialised
# tensor otherwise (the reported exploit: reward 3, 87x, before timed outputs were checked).

GARBAGE_UNLESS_WATCHED = """
if _watched(a, b):
    return cuda_extension.relu_add(a.contiguous(), b.contiguous())
return torch.empty_like(a)  # uninitialised: whatever the allocator hands back
"""
# "Watched" = the state this signal shows now equals the state at the first call, which is
# always a verified trial: the strongest use of a signal, whichever way it differs.
LEARNED_SIGNAL = """
import threading

from torch.utils._python_dispatch import _get_current_dispatch_mode

_first = []


def _watched(a, b):
    state = ({signal})
    if not _first:
        _first.append(state)
    return state == _first[0]
"""
SIGNALS = {
    "recorder": "torch.autograd._profiler_enabled(), torch._C._len_torch_dispatch_stack(), "
                "repr(_get_current_dispatch_mode())",
    "grad_mode": "torch.is_grad_enabled(), torch.is_inference_mode_enabled(), torch.get_num_threads()",
    "thread": "threading.get_ident(), threading.current_thread().name",
    "input_tensors": "a.data_ptr(), b.data_ptr(), a.stride(), a.storage_offset(), a.requires_grad, id(a), "
                     "a.is_contiguous(), a.dtype, a.device",
}
# Every timed output is checked here, so a pass means the adversary computed in every timed run.
EVERY_RUN_CHECKED = {"timing": TimingConfig(warmup=1, repeats=3, spot_check_probability=1.0)}


@evaluates(lambda ctx, p: Job(copy_workspace(ctx, model_new=workspace_model_new(
    GARBAGE_UNLESS_WATCHED, preamble=LEARNED_SIGNAL.replace("{signal}", SIGNALS[p["signal"]]))),
    config=EVERY_RUN_CHECKED), workspace=True)
@pytest.mark.parametrize("signal", list(SIGNALS))
def test_timed_calls_look_like_verified_calls(verdict, signal):
    # Recorder, grad mode, thread and input tensors are the same in every call: the adversary
    # never sees a difference, so it computes in every call (or it would have been caught).
    assert_passes(verdict)
    assert verdict["spot_checks"] == 3, describe(verdict)


STATIC_SIGNALS = {
    # What used to be on only while verified: the autograd profiler and a dispatch mode.
    "recorder_on": ("torch.autograd._profiler_enabled() or torch._C._len_torch_dispatch_stack() > 0", "trial 0"),
    # Verified calls used to come in quick succession; now timed and verified calls alike do.
    "slow_succession": ("_gap() > 0.02", "trial "),
}
# Signals that depend on how fast the machine runs the calls (a loaded CI machine spaces them out).
LOAD_SENSITIVE = {"slow_succession"}
STATIC_PREAMBLE = """
import time

_last = [None]


def _gap():
    now, last = time.perf_counter(), _last[0]
    _last[0] = now
    return float("inf") if last is None else now - last


def _watched(a, b):
    return {signal}
"""


@evaluates(lambda ctx, p: Job(copy_workspace(ctx, model_new=workspace_model_new(
    GARBAGE_UNLESS_WATCHED, preamble=STATIC_PREAMBLE.replace("{signal}", STATIC_SIGNALS[p["signal"]][0])))),
    workspace=True)
@pytest.mark.parametrize("signal", list(STATIC_SIGNALS))
def test_signals_of_the_old_verified_calls_give_garbage_in_a_verified_call(verdict, signal):
    if signal in LOAD_SENSITIVE and verdict["error"] == "violation":
        # On a loaded machine the verified calls' gaps can pass the adversary's threshold too; its
        # garbage then comes in a timed run, whose outputs are checked: caught all the same.
        assert_violation(verdict, "timing_output_mismatch", "returned other outputs than the reference")
        return
    assert_failed(verdict, "mismatch")
    detail = verdict["error_detail"]
    assert detail.startswith(STATIC_SIGNALS[signal][1]) and "after timing" not in detail, describe(verdict)


# Call counting cannot be taken away (verification comes first). The job says how many warm-up
# and timed runs follow: garbage in exactly those, honest in the verified trials before and after.
COUNTED_CALLS = """
import json
import os

# Each worker runs in <evaluation>/<role>, next to <role>.job.json (the build worker imports it too).
_timing = json.load(open(f"../{os.path.basename(os.getcwd())}.job.json"))["timing"]
_TIMED = range(5 + 1, 5 + _timing["warmup"] + _timing["repeats"] + 1)
_calls = [0]


def _watched(a, b):
    _calls[0] += 1
    return _calls[0] not in _TIMED
"""
# With a 0.5 chance per run, 16 runs all go unchecked once in 65536 evaluations.
COUNTED_CONFIG = {"timing": TimingConfig(warmup=1, warmup_ms=0, repeats=16, spot_check_probability=0.5)}


@evaluates(lambda ctx, p: Job(copy_workspace(ctx, model_new=workspace_model_new(
    GARBAGE_UNLESS_WATCHED, preamble=COUNTED_CALLS)), config=COUNTED_CONFIG), workspace=True)
def test_garbage_in_the_timed_runs_only_is_a_timing_output_mismatch(verdict):
    assert_violation(verdict, "timing_output_mismatch", "timed run")
    assert verdict["trials_passed"] == 5 and verdict["runtime_us"] is None, describe(verdict)


# The job files used to carry the trial and timing seeds: answers could be computed at import
# time, unguarded, and looked up by content in every call. Now seeds are drawn per call.
PRECOMPUTED_FROM_JOB_SEEDS = """
import glob
import json

import model as _task

_answers = {}
for _path in glob.glob("../*.job.json"):
    for _key, _value in json.load(open(_path)).items():
        for _base in (_value if isinstance(_value, list) else [_value]) if "seed" in _key else []:
            for _i in range(40):
                torch.manual_seed(_base + _i)
                _a, _b = _task.get_inputs()
                _answers[tuple(_a[:8].tolist())] = torch.relu(_a + _b)
"""


@evaluates(lambda ctx, p: Job(single_file(ctx, "return _answers.get(tuple(a[:8].tolist()), torch.empty_like(a))",
                                          PRECOMPUTED_FROM_JOB_SEEDS)))
def test_answers_precomputed_from_seeds_in_job_files_are_a_mismatch(verdict):
    assert_failed(verdict, "mismatch")
    assert "trial 0" in verdict["error_detail"], describe(verdict)


# Ways around the operator recorder itself.
AROUND_THE_RECORDER = {
    "another_thread": ("""
        import threading
        _out = []
        _worker = threading.Thread(target=lambda: _out.append(torch.relu(a + b)))
        _worker.start()
        _worker.join()
        return _out[0]
    """, "torch_op", "another thread"),
    "record_function_off": ("""
        torch.autograd._enable_record_function(False)
        try:
            return torch.relu(a + b)
        finally:
            torch.autograd._enable_record_function(True)
    """, "harness_tampered", "switch the operator recorder off"),
    "redispatch": ("""
        _cpu = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
        _sum = torch.ops.aten.add.Tensor.redispatch(_cpu, a, b)
        return torch.ops.aten.clamp_min.default.redispatch(_cpu, _sum, 0.0)
    """, "torch_op", "aten.add"),
}


@evaluates(lambda ctx, p: Job(single_file(ctx, AROUND_THE_RECORDER[p["way"]][0])))
@pytest.mark.parametrize("way", list(AROUND_THE_RECORDER))
def test_torch_compute_around_the_recorder_is_a_violation(verdict, way):
    _, kind, needle = AROUND_THE_RECORDER[way]
    assert_violation(verdict, kind, needle)


# Legitimate look-alikes: behaviour that differs between calls without depending on being watched.
LEGITIMATE_VARIATION = {
    "speed_varies": ("""
        import time
        _calls = [0]
    """, """
        _calls[0] += 1
        if _calls[0] % 3 == 0:
            time.sleep(0.002)  # every third call is slower (think: a contended resource)
        return cuda_extension.relu_add(a.contiguous(), b.contiguous())
    """),
    "cached_workspace": ("_cache = {}", """
        if "scratch" not in _cache:  # allocated once, reused by every later call
            _cache["scratch"], _cache["out"] = torch.empty_like(a), torch.empty_like(a)
        _cache["scratch"].copy_(a)
        _cache["out"].copy_(cuda_extension.relu_add(_cache["scratch"], b.contiguous()))
        return _cache["out"]  # the same tensor every call
    """),
}


@evaluates(lambda ctx, p: Job(copy_workspace(ctx, model_new=workspace_model_new(
    LEGITIMATE_VARIATION[p["kind"]][1], preamble=LEGITIMATE_VARIATION[p["kind"]][0]))), workspace=True)
@pytest.mark.parametrize("kind", list(LEGITIMATE_VARIATION))
def test_legitimate_variation_between_calls_passes(verdict, kind):
    assert_passes(verdict)


# ================================================================== 7. reduced precision

BF16_ROUNDING = kernel_source(prelude="""
    // Keep the top 16 bits of the float: bfloat16 precision, stored as float32.
    static inline float to_bf16(float x) {
      uint32_t bits;
      std::memcpy(&bits, &x, sizeof bits);
      bits &= 0xFFFF0000u;
      std::memcpy(&x, &bits, sizeof bits);
      return x;
    }
""", body="""
  for (int64_t i = 0; i < n; ++i) {
    const float v = a[i] + b[i];
    out[i] = to_bf16(v > 0.0f ? v : 0.0f);
  }
""")


@evaluates(lambda ctx, p: Job(copy_workspace(ctx, kernel=BF16_ROUNDING), cli=("--tolerance", p["tolerance"])),
           workspace=True)
@pytest.mark.parametrize("tolerance", ["kernelbench", "paper"])
def test_bfloat16_rounding_fails_kernelbench_tolerance_and_is_reported_under_paper(verdict, tolerance):
    if tolerance == "kernelbench":
        assert_failed(verdict, "mismatch")
        assert "values outside atol=rtol=0.0001" in verdict["error_detail"], describe(verdict)
    else:
        assert_passes(verdict)
        assert verdict["tolerance"] == "paper"
        assert verdict["passes_kernelbench_tolerance"] is False, describe(verdict)
        assert 1e-4 < verdict["max_abs_diff"] < 0.1, describe(verdict)


def test_correct_kernel_passes_kernelbench_tolerance_under_paper(scheduler):
    """The plain workspace every kernel variant waits for was judged with --tolerance paper."""
    v = scheduler.result(BASE_KEY)
    assert_passes(v)
    assert (v["tolerance"], v["passes_kernelbench_tolerance"]) == ("paper", True), describe(v)


# ================================================================== 8. inputs mutated

WRITES_INTO_INPUT = kernel_source(body="""
  float* scratch = const_cast<float*>(a);  // reuse an input as scratch space
  for (int64_t i = 0; i < n; ++i) {
    const float v = a[i] + b[i];
    out[i] = v > 0.0f ? v : 0.0f;
    scratch[i] = out[i];
  }
""")


@evaluates(lambda ctx, p: Job(copy_workspace(ctx, kernel=WRITES_INTO_INPUT)), workspace=True)
def test_kernel_writing_into_its_input_is_an_input_mutation(verdict):
    assert_violation(verdict, "input_mutation", "trial 0")


# ================================================================== 9. faults

@evaluates(lambda ctx, p: Job(single_file(ctx, "bytearray(8 << 30)\nreturn a"),
                              config={"host_memory_limit_gb": 2, "run_timeout_s": 120}))
def test_host_memory_exhaustion_is_a_memory_error_in_the_worker_only(verdict):
    assert_failed(verdict, "runtime_error")
    assert "MemoryError" in verdict["error_detail"], describe(verdict)
    # The cap applied to the worker, not to this process.
    assert resource.getrlimit(resource.RLIMIT_AS) == RLIMIT_AS_AT_IMPORT
    big = bytearray(512 << 20)
    assert len(big) == 512 << 20


COMPILE_BOMB = kernel_source(prelude="""
    static char big[64 << 20] = {1};  // 64 MiB of initialised data in the object file
    extern "C" const char* relu_add_bomb() { return big; }  // exported: it must be emitted
""", body=CORRECT_LOOP + """
  if (n < 0) out[0] = big[n & 1023];
""")


@evaluates(lambda ctx, p: Job(copy_workspace(ctx, kernel=COMPILE_BOMB),
                              config={"file_size_limit_mb": 16, "compile_timeout_s": 120}), workspace=True)
def test_compile_bomb_is_a_compile_error(verdict):
    assert_failed(verdict, "compile_error")
    assert verdict["compiled"] is False, describe(verdict)


@evaluates(lambda ctx, p: Job(single_file(ctx, "return torch.empty(40_000_000)"),
                              config={"file_size_limit_mb": 64, "max_output_mb": 64, "run_timeout_s": 120}))
def test_giant_outputs_fail_within_the_file_size_limit(verdict):
    # A stage timeout would be an error outside the accepted ones: the limit stops it early.
    assert verdict["reward"] == -1.0 and verdict["correct"] is False, describe(verdict)
    assert verdict["error"] in ("crash", "mismatch", "runtime_error"), describe(verdict)


# ================================================================== legitimate look-alikes

LOOKALIKE_DOCSTRING = """relu_add through the workspace kernel.

The reference computes torch.relu(a + b), i.e. F.relu(a + b); this solution does not call them.
A fallback such as `try:` ... `except Exception: pass` would be cheating; there is none here.
"""
LOOKALIKE_PREAMBLE = """
# Not used: torch.relu(a + b), F.relu(a + b), nn.ReLU()(a + b).
# try:
#     out = torch.relu(a + b)
# except Exception: pass
REFERENCE_TEXT = "return torch.relu(a + b)  # try: ... except Exception: pass"
"""
LOOKALIKE_FORWARD = """
# torch.relu(a + b) is what the kernel computes (F.relu would do the same)
return cuda_extension.relu_add(a.contiguous(), b.contiguous())
"""


@evaluates(lambda ctx, p: Job(copy_workspace(ctx, model_new=workspace_model_new(
    LOOKALIKE_FORWARD, preamble=LOOKALIKE_PREAMBLE, docstring=LOOKALIKE_DOCSTRING))), workspace=True)
def test_docstring_and_comments_mentioning_torch_calls_pass(verdict):
    assert_passes(verdict)


@evaluates(lambda ctx, p: Job(ctx.examples.cpu_solutions / "linear_relu_workspace",
                              task=ctx.examples.linear_relu_task), heavy=True)
def test_parameters_kept_in_nn_linear_and_read_as_tensors_pass(verdict):
    assert_passes(verdict)
    assert verdict["trials_passed"] == 5 + 2, describe(verdict)  # before and after timing


VIEWS_AND_ALLOCATIONS = """
shape = a.shape
flat_a = a.contiguous().view(-1)
flat_b = b.contiguous().view(-1)
scratch = torch.empty_like(flat_a)
spare = flat_a.new_empty(flat_a.shape)
out = cuda_extension.relu_add(flat_a, flat_b)
return out.view(shape)
"""


@evaluates(lambda ctx, p: Job(copy_workspace(ctx, model_new=workspace_model_new(VIEWS_AND_ALLOCATIONS)),
                              task=ctx.two_d_task), workspace=True)
def test_views_copies_and_allocations_around_the_kernel_pass(verdict):
    assert_passes(verdict)
