"""The sandbox pool: one result per request whatever happens, lanes held exclusively, cancel,
asyncio, cached builds, device selection, and the evaluate-batch CLI.

Solutions here are pure-Python ModelNew classes judged with guards off (no build: a cheap
evaluation is mostly worker start-up), except one workspace for the build cache. The ``cfg`` and
``python_solution`` fixtures are in conftest.py (tests/sandbox/test_lanes.py uses them too)."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from sandbox import SandboxConfig
from sandbox.pool import DeviceLanes, EvalRequest, SandboxPool, evaluate_many, visible_devices

CORRECT = "return torch.relu(a + b)"
WRONG = "return a + b"
CRASH = "os._exit(3)"
SLOW = "time.sleep(600)\nreturn torch.relu(a + b)"

BROKEN_TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a):
        raise RuntimeError("this task is broken")


def get_inputs():
    return [torch.randn(8)]


def get_init_inputs():
    return []
'''


def test_every_request_gets_exactly_one_result_whatever_happens(cfg, small_task, python_solution, tmp_path):
    broken = tmp_path / "broken_task.py"
    broken.write_text(BROKEN_TASK)
    requests = [EvalRequest("correct-1", small_task, python_solution("c1", CORRECT)),
                EvalRequest("correct-2", small_task, python_solution("c2", CORRECT)),
                EvalRequest("wrong", small_task, python_solution("w", WRONG)),
                EvalRequest("crash", small_task, python_solution("x", CRASH)),
                EvalRequest("broken-task", broken, python_solution("b", CORRECT)),
                EvalRequest("not-a-solution", small_task, tmp_path / "missing.py")]
    results = {}
    for result in evaluate_many(requests, cfg, workers=4):
        assert result.id not in results, f"duplicate result for {result.id}"
        results[result.id] = result
    assert set(results) == {r.id for r in requests}
    assert all(results[k].measurement.correct for k in ("correct-1", "correct-2"))
    assert results["wrong"].measurement.error == "mismatch"
    assert results["crash"].measurement.error == "crash"
    assert "broken" in results["broken-task"].task_error
    assert results["not-a-solution"].measurement.error == "invalid_solution"


def test_each_lane_is_held_by_one_evaluation_at_a_time(cfg, small_task, python_solution):
    """Two simulated device lanes (the cpu backend ignores the device entry): both are used, and
    neither is ever held by two evaluations at once."""
    intervals, lock = [], threading.Lock()
    lanes = DeviceLanes(["gpu-a", "gpu-b"], build_slots=2)
    original = lanes.device

    def recording_device(cancel):
        class Recorder:
            def __enter__(self):
                self.inner = original(cancel)
                self.device = self.inner.__enter__()
                self.start = time.monotonic()
                return self.device

            def __exit__(self, *exc):
                with lock:
                    intervals.append((self.device, self.start, time.monotonic()))
                return self.inner.__exit__(*exc)
        return Recorder()

    lanes.device = recording_device
    pool = SandboxPool(cfg, workers=6)
    pool.lanes = lanes
    with pool:
        results = list(pool.map([EvalRequest(str(i), small_task, python_solution(f"s{i}", CORRECT))
                                 for i in range(6)]))
    assert all(r.measurement.correct for r in results)
    assert len(intervals) == 6
    for device in ("gpu-a", "gpu-b"):
        held = sorted((start, end) for d, start, end in intervals if d == device)
        assert held, f"lane {device} was never used"
        for (_, end), (start, _) in zip(held, held[1:]):
            assert start >= end, f"two evaluations held lane {device} at once"
    assert lanes.served["gpu-a"] + lanes.served["gpu-b"] == 6



def test_a_lane_is_taken_only_once_the_held_workers_have_started(cfg, small_task, python_solution, monkeypatch):
    """Worker start-up (Python, torch, the harness: seconds) never holds a lane slot, even when the
    lane is free the moment the build ends: both held workers report "held" before the slot is
    taken."""
    from sandbox import process

    events, lock = [], threading.Lock()
    wait_for = process.WorkerProcess.wait_for

    def recording_wait_for(self, name, timeout_s):
        payload = wait_for(self, name, timeout_s)
        with lock:
            events.append((name, self.role, time.monotonic()))
        return payload

    monkeypatch.setattr(process.WorkerProcess, "wait_for", recording_wait_for)
    lanes = DeviceLanes(["gpu-a"], build_slots=1)
    original = lanes.device

    def recording_device(cancel):
        with lock:
            events.append(("lane", "", time.monotonic()))
        return original(cancel)

    lanes.device = recording_device
    pool = SandboxPool(cfg, workers=1)
    pool.lanes = lanes
    with pool:
        result = pool.submit(EvalRequest("one", small_task, python_solution("held", CORRECT))).result()
    m = result.measurement
    assert m.correct, m.error_detail
    held = {role: t for name, role, t in events if name == "held"}
    lane_at = next(t for name, _, t in events if name == "lane")
    assert set(held) == {"reference", "run"}
    assert max(held.values()) <= lane_at
    assert m.stage_seconds["worker_start"] > 0

def test_cancel_kills_a_running_evaluation_and_spares_the_rest(cfg, small_task, python_solution):
    with SandboxPool(cfg, workers=2) as pool:
        slow = pool.submit(EvalRequest("slow", small_task, python_solution("slow", SLOW)))
        quick = pool.submit(EvalRequest("quick", small_task, python_solution("quick", CORRECT)))
        deadline = time.monotonic() + 120
        while not any(lanes_busy(pool)) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(3)  # the slow one is inside its forward (or queued behind the quick one)
        started = time.monotonic()
        assert pool.cancel(slow)
        assert slow.result(timeout=30).cancelled
        assert time.monotonic() - started < 30
        assert quick.result(timeout=120).measurement.correct


def lanes_busy(pool: SandboxPool) -> list[bool]:
    return [n > 0 for n in pool.lanes.in_use().values()]


def test_cancelling_before_start_never_runs_it(cfg, small_task, python_solution):
    with SandboxPool(cfg, workers=1) as pool:
        first = pool.submit(EvalRequest("first", small_task, python_solution("first", CORRECT)))
        queued = pool.submit(EvalRequest("queued", small_task, python_solution("queued", CORRECT)))
        assert pool.cancel(queued)
        assert queued.cancelled() or queued.result().cancelled
        assert first.result(timeout=120).measurement.correct


def test_asyncio_clients_await_results(cfg, small_task, python_solution):
    async def judge_all(pool):
        tasks = [pool.evaluate(EvalRequest(f"a{i}", small_task, python_solution(f"a{i}", body)))
                 for i, body in enumerate((CORRECT, WRONG))]
        return await asyncio.gather(*tasks)

    with SandboxPool(cfg, workers=2) as pool:
        correct, wrong = asyncio.run(judge_all(pool))
    assert (correct.id, correct.measurement.correct) == ("a0", True)
    assert (wrong.id, wrong.measurement.error) == ("a1", "mismatch")


def test_cached_workspace_skips_the_build_worker(sandbox_cache, example_paths, tmp_path, cfg):
    cfg = SandboxConfig(backend="cpu", cache_dir=str(sandbox_cache), compile_baseline=False, timing=cfg.timing)
    workspace = tmp_path / "ws"
    shutil.copytree(example_paths.cpu_solutions / "relu_add_workspace", workspace)
    request = EvalRequest("ws", example_paths.relu_add_task, workspace)
    with SandboxPool(cfg) as pool:
        first = pool.submit(request).result()
        started = time.monotonic()
        assert pool.lanes.install_cached_build(workspace, pool.cfg)
        hit_s = time.monotonic() - started
        second = pool.submit(request).result()
    assert first.measurement.correct and second.measurement.correct, first.measurement.error_detail
    assert second.measurement.stage_seconds["build"] == 0.0
    assert hit_s < 2.0  # H200 host target 0.2 s: docs/benchmarks.md


@pytest.mark.parametrize("environ, count, expected", [
    ({}, 2, ["0", "1"]),
    ({"CUDA_VISIBLE_DEVICES": "3,1"}, 8, ["3", "1"]),
    ({"CUDA_VISIBLE_DEVICES": "GPU-aaaa, GPU-bbbb"}, 8, ["GPU-aaaa", "GPU-bbbb"]),
    ({"CUDA_VISIBLE_DEVICES": "2,-1,3"}, 8, ["2"]),
    ({"CUDA_VISIBLE_DEVICES": ""}, 8, []),
])
def test_visible_devices_follow_cuda_visible_devices(environ, count, expected):
    assert visible_devices("cuda", environ, count) == expected
    assert visible_devices("cpu", environ, count) == ["-"]


def test_no_device_to_time_on_is_a_clear_error():
    with pytest.raises(ValueError, match="no device"):
        DeviceLanes([], build_slots=1)


def test_evaluate_batch_cli_writes_one_line_per_id_and_resumes(run_sandbox, small_task, python_solution,
                                                               sandbox_cache, tmp_path):
    manifest = tmp_path / "in.jsonl"
    out = tmp_path / "out.jsonl"
    entries = [{"id": "good", "task": str(small_task), "solution": str(python_solution("g", CORRECT))},
               {"id": "bad", "task": str(small_task), "solution": str(python_solution("b", WRONG))}]
    manifest.write_text("".join(json.dumps(e) + "\n" for e in entries))
    args = ["evaluate-batch", "--manifest", manifest, "--out", out, "--backend", "cpu", "--no-guards",
            "--no-compile-baseline", "--warmup", "1", "--repeats", "2", "--cache-dir", sandbox_cache]
    first = run_sandbox(*args)
    assert first.returncode == 0, first.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    by_id = {line["id"]: line for line in lines}
    assert len(lines) == 2 and by_id["good"]["reward"] >= 1 and by_id["bad"]["error"] == "mismatch"
    entries.append({"id": "third", "task": str(small_task), "solution": str(python_solution("t", CORRECT))})
    manifest.write_text("".join(json.dumps(e) + "\n" for e in entries))
    second = run_sandbox(*args)
    assert second.returncode == 0, second.stderr
    assert "2 already in" in second.stderr
    ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert sorted(ids[:2]) == ["bad", "good"] and ids[2:] == ["third"]  # only the new id was judged


def test_evaluate_batch_rejects_a_bad_manifest_line_before_judging(run_sandbox, small_task, tmp_path):
    manifest = tmp_path / "in.jsonl"
    manifest.write_text(json.dumps({"id": "a", "task": str(small_task), "solution": "nope.py"}) + "\n{oops\n")
    res = run_sandbox("evaluate-batch", "--manifest", manifest, "--out", tmp_path / "out.jsonl", "--backend", "cpu")
    assert res.returncode == 2
    assert "in.jsonl:1: solution not found" in res.stderr
    assert not (tmp_path / "out.jsonl").exists()


def test_stop_after_build_and_verify_skip_what_they_do_not_need(cfg, small_task, python_solution, tmp_path):
    solution = python_solution("staged", CORRECT)
    with SandboxPool(cfg, workers=3) as pool:
        built, verified, timed = (pool.submit(EvalRequest(stage, small_task, solution, stop_after=stage)).result()
                                  for stage in ("build", "verify", "timing"))
    b, v, t = built.measurement, verified.measurement, timed.measurement
    assert (b.compiled, b.correct, b.stopped_after) == (True, False, "build")
    assert "reference" not in b.stage_seconds and b.runtime_us is None  # no reference run, no lane
    assert (v.correct, v.trials_passed, v.num_trials, v.runtime_us) == (True, 5, 5, None)
    assert "timing" not in v.stage_seconds
    assert t.correct and t.runtime_us > 0 and t.num_trials == 7 and t.stopped_after == "timing"
    broken = tmp_path / "broken_task.py"
    broken.write_text(BROKEN_TASK)
    # A build-only request never runs the reference, so a broken task is not noticed there.
    assert evaluate_one_build(broken, solution, cfg).measurement.compiled


def evaluate_one_build(task, solution, cfg):
    with SandboxPool(cfg, workers=1) as pool:
        return pool.submit(EvalRequest("b", task, solution, stop_after="build")).result()


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux affinity and 2 cores")
def test_lane_workers_run_on_their_lanes_cores(cfg, small_task, python_solution):
    """Two simulated lanes on the first core, builds on the second: the solution (a held run
    worker) runs on its lane's core, not on the build core it waited on, nor unpinned."""
    from sandbox.placement import CpuPlan

    cores = sorted(os.sched_getaffinity(0))
    plan = CpuPlan({"gpu-a": (cores[0],), "gpu-b": (cores[0],)}, builds=(cores[1],))
    pool = SandboxPool(cfg, workers=4)
    pool.lanes = DeviceLanes(["gpu-a", "gpu-b"], build_slots=2)
    pool.lanes.cpus = plan
    body = 'print("AFFINITY", sorted(os.sched_getaffinity(0)), flush=True)\n' + CORRECT
    with pool:
        results = list(pool.map([EvalRequest(str(i), small_task, python_solution(f"p{i}", body)) for i in range(4)]))
    seen = set()
    for r in results:
        assert r.measurement.correct, r.measurement.error_detail
        line = next(x for x in r.measurement.logs["run"].splitlines() if x.startswith("AFFINITY"))
        seen.add(line)
    assert seen == {f"AFFINITY [{cores[0]}]"}, seen


HELD_IMPORTS = """
import sys
import torch

counted = []
for owner, name in ((torch.cuda, "is_available"), (torch.cuda, "device_count"), (torch._C, "_cuda_getDeviceCount")):
    if hasattr(owner, name):
        setattr(owner, name, lambda *a, _n=name, **k: counted.append(_n) or 0)
import sandbox.worker  # what a held worker has loaded while it waits for its lane
print(counted, "torch.utils.cpp_extension" in sys.modules)
"""


def test_a_held_worker_never_counts_cuda_devices_before_its_lane(tmp_path):
    # A held worker waits with CUDA_VISIBLE_DEVICES empty and learns its GPU at "start"; the CUDA
    # driver counts devices once per process, so a count taken while waiting (importing
    # torch.utils.cpp_extension does one on CUDA builds of torch) would leave it blind to its GPU.
    import subprocess
    import sys

    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    out = subprocess.run([sys.executable, "-c", HELD_IMPORTS], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["[]", "False"], out.stdout
