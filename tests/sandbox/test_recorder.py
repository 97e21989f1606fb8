"""The run worker's operator recorder (sandbox/native/op_recorder.cpp): what it counts, where, and
that the Python-level switches around it are trapped.

A global RecordFunction callback cannot be removed again, so each check runs in a fresh
interpreter (the test process's own operators stay unobserved).
"""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sandbox.guards import ALLOWED_OPS
from sandbox.recorder import library_path, watched_operators

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def library(sandbox_cache) -> str:
    return str(library_path(Path(sandbox_cache)))


def run_script(body: str, library: str) -> dict:
    """Run ``body`` with ``recorder`` (armed, on the main thread) and ``guard`` in scope; it
    assigns ``result``, printed as JSON."""
    script = textwrap.dedent("""
        import json, sys, threading
        sys.path.insert(0, {root!r})
        import torch
        from sandbox.guards import ForwardGuard
        guard = ForwardGuard([], [], {library!r})
        recorder = guard.recorder
        x = torch.randn(16)
        recorder.arm()
        result = {{}}
    """).format(root=str(ROOT), library=library) + textwrap.dedent(body) + "\nprint(json.dumps(result))\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_watched_operators_leave_out_allowed_ones_and_bookkeeping():
    watched = set(watched_operators(ALLOWED_OPS))
    assert {"aten::relu", "aten::add", "aten::mm", "prims::add"} <= watched
    assert not {"aten::empty_like", "aten::copy_", "aten::view", "aten::_to_copy"} & watched
    assert not any(name.startswith("profiler::") for name in watched)


def test_counts_torch_compute_inside_a_call_and_on_other_threads(library):
    result = run_script("""
        torch.relu(x)                       # the harness's own work between calls: not counted
        guard.enter_call()
        torch.add(x, x)                     # compute inside forward
        torch.empty_like(x).copy_(x.view(-1))  # allocation, copy, view: allowed
        guard.leave_call()
        worker = threading.Thread(target=lambda: torch.mul(x, x))
        worker.start(); worker.join()       # another thread, between calls: counted
        result["findings"] = dict(recorder.findings())
        result["violations"] = guard._recorded()
    """, library)
    assert result["findings"] == {"aten::add": 1, "aten::mul@thread": 1}, result
    assert any("aten.add ran inside forward (1x)" in v for v in result["violations"]), result
    assert any("aten.mul ran on another thread" in v for v in result["violations"]), result


def test_switching_record_function_off_is_trapped_and_the_recorder_stays_alive(library):
    result = run_script("""
        torch.autograd._enable_record_function(False)   # a trap now: records, switches nothing
        torch._C._autograd._clear_callbacks()
        guard.enter_call()
        torch.relu(x)
        guard.leave_call()
        result["alive"] = recorder.alive()
        result["violations"] = guard._recorded()
    """, library)
    assert result["alive"] is True
    assert any(v.startswith("harness_tampered: the solution tried to switch the operator recorder off (")
               and v.endswith("(2x)") for v in result["violations"]), result
    assert any("aten.relu ran inside forward" in v for v in result["violations"]), result


def test_canary_sees_a_recorder_switched_off_behind_the_traps(library):
    # The real switch, reached around the trap through ctypes into libtorch: the canary notices.
    result = run_script("""
        import ctypes, os
        libtorch = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
        result["before"] = recorder.alive()
        libtorch._ZN2at20enableRecordFunctionEb(False)  # at::enableRecordFunction(false)
        result["violations"] = guard._recorded()
        libtorch._ZN2at20enableRecordFunctionEb(True)
    """, library)
    assert result["before"] is True
    assert any(v.startswith("harness_tampered: the operator recorder no longer sees operators")
               for v in result["violations"]), result
