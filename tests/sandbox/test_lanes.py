"""Lane slots (sandbox/lanes.py): several evaluations share a device lane, their commands and
baseline compiles overlap, and every timed section has the device to itself; cancelled waits
end cleanly.

The first tests drive DeviceLanes directly (threads, no processes); the pool tests judge real
solutions in real worker processes on the CPU backend's lane and read what the solutions
themselves saw (timestamps printed by their calls and by a background thread)."""
from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from dataclasses import replace

import pytest

from sandbox.gate import DeviceGate
from sandbox.judge import evaluate_baselines
from sandbox.lanes import DeviceLanes
from sandbox.pool import EvalRequest, SandboxPool
from sandbox.process import ISOLATION_PREFIX, Cancelled, freeze_tree, kill_tree, namespaces_available, thaw


@pytest.fixture(autouse=True)
def own_gate_dir(tmp_path, monkeypatch):
    """Gates of these tests only (the machine's real gates belong to other pools)."""
    monkeypatch.setenv("CUDA_AGENT_GATE_DIR", str(tmp_path / "gates"))


def in_thread(target) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def test_commands_overlap_timing_waits_for_them_and_then_excludes_them():
    lanes = DeviceLanes(["gpu-x"], build_slots=1, lane_slots=3)
    never = threading.Event()
    a, b, c = (lanes.session("gpu-x", never).__enter__() for _ in range(3))
    timing_in, timing_out, late_in = threading.Event(), threading.Event(), threading.Event()

    def timed_section():
        with c.timing():
            timing_in.set()
            with c.work():  # its own commands inside the section: free, no deadlock
                time.sleep(0.2)
        timing_out.set()

    def late_command():
        with a.work():
            late_in.set()

    with a.work(), b.work():  # two evaluations' commands at once
        writer = in_thread(timed_section)
        assert not timing_in.wait(0.2), "timing began while other commands were in flight"
        reader = in_thread(late_command)  # queues behind the waiting timed section
        assert not late_in.wait(0.2)
    assert timing_in.wait(5)
    assert not late_in.is_set(), "a command ran during another evaluation's timing"
    writer.join(5)
    reader.join(5)
    assert timing_out.is_set() and late_in.is_set()
    assert lanes.timed["gpu-x"] == 1 and lanes.timing_s["gpu-x"] >= 0.2


@pytest.mark.parametrize("beside", [False, True])
def test_harness_commands_run_beside_timing_only_when_the_lanes_say_so(beside):
    """A reference-worker command (``harness``) in flight: by default a timed section waits for
    it, as for any command; with ``harness_beside_timing`` the section starts at once, and another
    harness command enters while it times. Solution work (``work``) waits either way."""
    lanes = DeviceLanes(["-"], build_slots=1, lane_slots=3, harness_beside_timing=beside)
    never = threading.Event()
    a, b, c = (lanes.session("-", never).__enter__() for _ in range(3))
    timing_in, release, harness_in, work_in = (threading.Event() for _ in range(4))

    def timed_section():
        with c.timing():
            timing_in.set()
            release.wait(5)

    def harness_command():
        with b.harness():
            harness_in.set()

    def solution_command():
        with b.work():
            work_in.set()

    with a.harness():
        writer = in_thread(timed_section)
        assert timing_in.wait(0.3) == beside, "a timed section and a harness command in flight"
    assert timing_in.wait(5)
    in_thread(harness_command)
    in_thread(solution_command)
    assert harness_in.wait(0.3) == beside, "a harness command during a timed section"
    assert not work_in.wait(0.2), "solution work ran during a timed section"
    release.set()
    writer.join(5)
    assert harness_in.wait(5) and work_in.wait(5)


def test_timed_sections_queued_behind_a_compile_go_before_a_compile_that_asked_earlier():
    """A round of compiles in flight; one evaluation asks to time, then another asks to compile,
    then a second asks to time. Both timings run (one after the other) before the new compile:
    otherwise each timing would wait for a fresh round of compiles (the 250-problem baselines
    run's bottleneck: one problem per compile's length)."""
    lanes = DeviceLanes(["gpu-x"], build_slots=1, lane_slots=4)
    never = threading.Event()
    first, timer1, compiler, timer2 = (lanes.session("gpu-x", never).__enter__() for _ in range(4))
    order, lock = [], threading.Lock()

    def note(what):
        with lock:
            order.append(what)

    def timed(lane, name):
        with lane.timing():
            note(name)
            time.sleep(0.1)

    def compile_later():
        with compiler.compiling():
            note("compile")

    with first.compiling():
        threads = [in_thread(lambda: timed(timer1, "timing 1"))]
        time.sleep(0.2)
        threads.append(in_thread(compile_later))
        time.sleep(0.2)
        threads.append(in_thread(lambda: timed(timer2, "timing 2")))
        time.sleep(0.2)
        assert order == [], "something ran beside a compile's hold and a waiting timing"
    for thread in threads:
        thread.join(5)
    assert sorted(order[:2]) == ["timing 1", "timing 2"] and order[2] == "compile"
    assert lanes.compiles["gpu-x"] == 2 and lanes.timed["gpu-x"] == 2


def test_a_compile_waiting_for_timed_sections_can_be_cancelled():
    lanes = DeviceLanes(["gpu-x"], build_slots=1, lane_slots=3)
    never, cancel = threading.Event(), threading.Event()
    holder, timer, waiter = (lanes.session("gpu-x", e).__enter__() for e in (never, never, cancel))
    timed = threading.Event()

    def timed_section():
        with timer.timing():
            timed.set()

    with holder.work():  # the timed section waits for this command, the compile for the timing
        thread = in_thread(timed_section)
        time.sleep(0.1)
        cancel.set()
        with pytest.raises(Cancelled, match="timed sections"):
            with waiter.compiling():
                pass
    thread.join(5)
    assert timed.is_set() and lanes.compiles["gpu-x"] == 0


def test_slots_bound_evaluations_per_device_and_busy_time_counts_both_ways():
    lanes = DeviceLanes(["gpu-a", "gpu-b"], build_slots=1, lane_slots=2)
    never, fifth_in = threading.Event(), threading.Event()

    def fifth():
        with lanes.device(never):
            fifth_in.set()

    with contextlib.ExitStack() as held:
        got = [held.enter_context(lanes.device(never)) for _ in range(4)]
        assert sorted(got) == ["gpu-a", "gpu-a", "gpu-b", "gpu-b"]  # least used first
        waiter = in_thread(fifth)
        assert not fifth_in.wait(0.2), "a fifth evaluation got a slot of two 2-slot lanes"
        time.sleep(0.1)
        busy = dict(lanes.busy_s)
    waiter.join(5)
    assert fifth_in.is_set() and busy == {}  # busy time is counted when a lane goes idle
    for device in ("gpu-a", "gpu-b"):
        # Two holds at once: summed slot time is about twice the time the lane was busy.
        assert lanes.slot_s[device] > 1.5 * lanes.busy_s[device] > 0
    assert lanes.served["gpu-a"] + lanes.served["gpu-b"] == 5


def test_cancel_while_waiting_for_a_slot_or_the_timing_section():
    lanes = DeviceLanes(["-"], build_slots=1)
    cancel = threading.Event()
    with lanes.device(threading.Event()) as device:
        cancel.set()
        with pytest.raises(Cancelled, match="device lane"):
            lanes.device(cancel).__enter__()
        with lanes.session(device, threading.Event()) as holder, holder.work():
            with lanes.session(device, cancel) as lane, pytest.raises(Cancelled, match="gate"):
                with lane.timing():
                    pass
    assert lanes.in_use() == {"-": 0} and lanes.timed["-"] == 0


@pytest.mark.skipif(bool(namespaces_available()), reason=namespaces_available() or "")
def test_a_frozen_worker_in_its_own_namespaces_stops_and_resumes():
    """SIGSTOP reaches every process of an isolated worker (the namespace's init included) and
    SIGCONT resumes them: nothing it printed is stamped inside the frozen window."""
    loop = "import time\nwhile True:\n    print(time.monotonic(), flush=True)\n    time.sleep(0.01)\n"
    proc = subprocess.Popen([*ISOLATION_PREFIX, "/bin/sh", "-c", '"$@"; exit $?', "sh", sys.executable, "-c", loop],
                            stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)
        stopped = freeze_tree(proc)
        frozen_at = time.monotonic()
        time.sleep(0.5)
        thawed_at = time.monotonic()
        thaw(stopped)
        time.sleep(0.3)
    finally:
        kill_tree(proc)  # unshare, and the namespace's processes with it
    stamps = [float(line) for line in proc.communicate()[0].split()]
    assert len(stopped) >= 3  # unshare, sh (init), python
    assert not [t for t in stamps if frozen_at < t < thawed_at], "a frozen worker kept running"
    assert any(t > thawed_at for t in stamps), "the worker did not resume"


# ---------------------------------------------------------------- real pools

class RecordingLanes(DeviceLanes):
    """DeviceLanes that note when each timed section held the device (frozen others included)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.timed_sections: list[tuple[float, float]] = []
        self.compile_holds: list[tuple[float, float]] = []
        self.asked_to_time, self.commands = threading.Event(), 0

    @contextlib.contextmanager
    def work(self, device, cancel):
        with super().work(device, cancel):
            self.commands += 1
            yield

    @contextlib.contextmanager
    def compiling(self, device, cancel):
        with super().compiling(device, cancel):
            start = time.monotonic()
            try:
                yield
            finally:
                self.compile_holds.append((start, time.monotonic()))

    @contextlib.contextmanager
    def timing(self, device, cancel, timer):
        self.asked_to_time.set()
        with super().timing(device, cancel, timer):
            start = time.monotonic()
            try:
                yield
            finally:
                self.timed_sections.append((start, time.monotonic()))


# The first verified trial waits (up to WAIT_S) until the other evaluation's first trial has
# begun, so that with two slots both verifications surely overlap (given cached baselines:
# timing the other's would wait for this trial, which waits for it). Later trials take TRIAL_S
# (b's longer than a's: a times while b still verifies), timed runs and post trials 50 ms. A
# background thread stamps the time every 2 ms for as long as the run worker lives.
RENDEZVOUS_SOLUTION = '''
import os
import threading
import time

import torch
import torch.nn as nn

MARKS, ME, OTHER, WAIT_S, TRIAL_S = {marks!r}, {me!r}, {other!r}, {wait_s!r}, {trial_s!r}


def say(*words):
    os.write(1, (" ".join(map(str, words)) + "\\n").encode())  # one write: lines never interleave


def beat():
    while True:
        say("BEAT", time.monotonic())
        time.sleep(0.002)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        threading.Thread(target=beat, daemon=True).start()

    def forward(self, a, b):
        self.calls += 1
        start = time.monotonic()
        if self.calls == 1:
            open(os.path.join(MARKS, ME), "w").close()
            while not os.path.exists(os.path.join(MARKS, OTHER)) and time.monotonic() < start + WAIT_S:
                time.sleep(0.01)
        else:
            time.sleep(TRIAL_S if self.calls <= 5 else 0.05)
        out = torch.relu(a + b)
        say("CALL", self.calls, start, time.monotonic())
        return out
'''


def rendezvous_pair(tmp_path, wait_s: float) -> list:
    marks = tmp_path / "marks"
    marks.mkdir()
    paths = []
    for me, other, trial_s in (("a", "b", 0.05), ("b", "a", 0.4)):
        path = tmp_path / me / "model_new.py"
        path.parent.mkdir()
        path.write_text(textwrap.dedent(RENDEZVOUS_SOLUTION.format(marks=str(marks), me=me, other=other,
                                                                   wait_s=wait_s, trial_s=trial_s)))
        paths.append(path)
    return paths


def seen_by(log: str) -> tuple[list[tuple[int, float, float]], list[float]]:
    """(calls as (number, start, end), heartbeat stamps) from a run worker's log."""
    calls, beats = [], []
    for line in log.splitlines():
        words = line.split()
        if words[:1] == ["CALL"] and len(words) == 4:
            calls.append((int(words[1]), float(words[2]), float(words[3])))
        elif words[:1] == ["BEAT"] and len(words) == 2:
            beats.append(float(words[1]))
    return calls, beats


def overlaps(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


@pytest.mark.parametrize("slots, wait_s, beside", [(2, 30.0, False), (1, 2.0, False), (2, 30.0, True)])
def test_two_slots_overlap_verification_never_timing(cfg, small_task, tmp_path, slots, wait_s, beside):
    """Two evaluations on the CPU backend's one lane. With two slots their verified trials run at
    the same time; with one they never do. Either way, while one evaluation times (baselines or
    its timed runs), nothing of the other runs: not its calls, not its background thread (its run
    worker is stopped), also when the reference workers' commands may run beside timed sections
    (``beside``). isolate=False: the rendezvous writes outside the worker directories."""
    cfg = replace(cfg, isolate=False, log_chars=1 << 20, lane_slots=slots,
                  timing=replace(cfg.timing, harness_beside_timing=beside))
    if slots == 2:
        evaluate_baselines(small_task, cfg)  # into the cache (see RENDEZVOUS_SOLUTION)
    pool = SandboxPool(cfg, workers=2, build_workers=2)
    assert pool.lanes.lane_slots == slots and pool.lanes.harness_beside_timing == beside
    pool.lanes = lanes = RecordingLanes(["-"], build_slots=2, lane_slots=slots, harness_beside_timing=beside)
    with pool:
        results = list(pool.map([EvalRequest(p.parent.name, small_task, p) for p in rendezvous_pair(tmp_path, wait_s)]))
    seen = {}
    for r in results:
        assert r.measurement.correct, r.measurement.error_detail
        seen[r.id] = seen_by(r.measurement.logs["run"])
        numbers = [n for n, _, _ in seen[r.id][0]]
        assert numbers == list(range(1, 11)), f"{r.id}: calls {numbers}"  # 5 trials, 1 + 2 timed, 2 after
    verifying = {rid: [(s, e) for n, s, e in calls if n <= 5] for rid, (calls, _) in seen.items()}
    overlapped = any(overlaps(x, y) for x in verifying["a"] for y in verifying["b"])
    assert overlapped == (slots == 2), f"verified trials overlapped: {overlapped} with {slots} slot(s)"
    assert lanes.timed["-"] >= 2  # each evaluation's timed runs (and the baselines, when not cached)
    sections = sorted(lanes.timed_sections)
    assert all(end <= start for (_, end), (start, _) in zip(sections, sections[1:])), "timed sections overlapped"
    for section in sections:
        inside = {rid: [c for c in calls if overlaps(section, c[1:])] + [t for t in beats if section[0] < t < section[1]]
                  for rid, (calls, beats) in seen.items()}
        assert sum(bool(v) for v in inside.values()) <= 1, f"both ran during the timed section {section}: {inside}"
    # Slot time summed over evaluations, against the time the lane had any: more when they overlapped.
    assert lanes.busy_s["-"] > 0
    assert lanes.slot_s["-"] > lanes.busy_s["-"] if slots == 2 else lanes.slot_s["-"] == pytest.approx(lanes.busy_s["-"])


def test_cancel_while_waiting_for_the_timing_section_ends_cleanly(cfg, small_task, python_solution):
    """Training holds the device gate: an evaluation does its other device work meanwhile (the
    gate covers timing only), then waits to time; cancelled there, it ends at once, and the lane
    judges the next evaluation as usual once the gate is free."""
    pool = SandboxPool(cfg, workers=2)
    pool.lanes = lanes = RecordingLanes(["-"], build_slots=1, lane_slots=2)
    with pool:
        with DeviceGate("cpu"):
            waiting = pool.submit(EvalRequest("waits", small_task, python_solution("w", "return torch.relu(a + b)")))
            assert lanes.asked_to_time.wait(180), "the evaluation never reached its timed section"
            assert lanes.commands >= 1  # the reference ran while training held the gate
            started = time.monotonic()
            assert pool.cancel(waiting)
            assert waiting.result(timeout=30).cancelled
            assert time.monotonic() - started < 10
            assert lanes.in_use() == {"-": 0} and lanes.timed["-"] == 0
        after = pool.submit(EvalRequest("after", small_task, python_solution("n", "return torch.relu(a + b)")))
        assert after.result(timeout=180).measurement.correct
    assert lanes.timed["-"] >= 1


# A task whose forward stamps every real call in the reference worker's log (eagerly, also in
# compiled calls: torch.compiler.disable). Its first real call is torch.compile's, in the
# "compile" command: it waits (up to WAIT_S) until the other task's first call has begun, so that
# with compiles held shared both surely compile at once, and held exclusively they never could.
STAMPED_TASK = '''
import os
import time

import torch
import torch.nn as nn

MARKS, ME, OTHER, WAIT_S = {marks!r}, {me!r}, {other!r}, {wait_s!r}
calls = 0


@torch.compiler.disable
def stamp(x):
    global calls
    if x.device.type == "meta":  # the trial-size check's shapes-only run
        return
    calls += 1
    if calls == 1:
        open(os.path.join(MARKS, ME), "w").close()
        deadline = time.monotonic() + WAIT_S
        while not os.path.exists(os.path.join(MARKS, OTHER)) and time.monotonic() < deadline:
            time.sleep(0.01)
    os.write(1, ("CALL %r\\n" % time.monotonic()).encode())


class Model(nn.Module):
    def forward(self, a, b):
        stamp(a)
        return torch.relu(a + b)


def get_inputs():
    return [torch.randn(4099), torch.randn(4099)]


def get_init_inputs():
    return []

# {fresh}: never in the baseline cache
'''


def stamped_pair(tmp_path, wait_s: float) -> list:
    marks = tmp_path / "marks"
    marks.mkdir()
    paths = []
    for me, other in (("a", "b"), ("b", "a")):
        path = tmp_path / f"{me}.py"
        path.write_text(STAMPED_TASK.format(marks=str(marks), me=me, other=other, wait_s=wait_s,
                                            fresh=uuid.uuid4().hex))
        paths.append(path)
    return paths


def stamps(log: str) -> list[float]:
    return [float(line.split()[1]) for line in log.splitlines() if line.startswith("CALL ")]


def test_two_baseline_evaluations_compile_together_and_time_apart(cfg, tmp_path):
    """Two evaluate_baselines on one lane of two slots: their torch.compile holds overlap in time,
    their timed sections never do, and no call of one task runs during the other's timed section
    (as the tasks' own stamps say)."""
    cfg = replace(cfg, compile_baseline=True, log_chars=1 << 20)
    lanes = RecordingLanes(["-"], build_slots=1, lane_slots=2)
    results = {}
    threads = [in_thread(lambda p=p: results.setdefault(p.stem, evaluate_baselines(p, cfg, lanes=lanes)))
               for p in stamped_pair(tmp_path, wait_s=60.0)]
    for thread in threads:
        thread.join(300)
    assert set(results) == {"a", "b"}, "an evaluation failed (its thread's traceback is above)"
    calls = {}
    for name, m in results.items():
        assert m.eager_us > 0 and m.compile_us > 0 and not m.baseline_cached, m.compile_error
        assert m.stage_seconds["compile"] > 0
        calls[name] = stamps(m.logs["reference"])
        assert len(calls[name]) == 7, calls[name]  # the compile's call, then 1 + 2 eager and 1 + 2 compiled
    holds = lanes.compile_holds
    assert len(holds) == 2 and overlaps(*holds), f"the compiles did not overlap: {holds}"
    assert lanes.compiles["-"] == 2 and lanes.compile_s["-"] > 0
    for name, first_call in ((n, c[0]) for n, c in calls.items()):
        assert any(start < first_call < end for start, end in holds), f"{name} compiled outside a compile hold"
    sections = sorted(lanes.timed_sections)
    assert len(sections) == 2 and sections[0][1] <= sections[1][0], f"timed sections overlapped: {sections}"
    for section in sections:
        inside = {name: [t for t in stamped if section[0] < t < section[1]] for name, stamped in calls.items()}
        assert sum(bool(v) for v in inside.values()) == 1, f"calls of both tasks in the timed section {section}"


@pytest.mark.gpu
def test_two_slots_on_one_gpu_judge_as_one_slot_does(sandbox_cache, example_paths):
    """On a real GPU with two slots: three CUDA solutions judged correct (workspace, load_inline,
    cuBLAS), every timed section alone on the device, and the slots' time overlapping."""
    from sandbox import SandboxConfig

    cfg = SandboxConfig(backend="cuda", cache_dir=str(sandbox_cache), lane_slots=2)
    pool = SandboxPool(cfg, workers=4)
    pool.lanes = lanes = RecordingLanes(pool.lanes.devices[:1], build_slots=2, lane_slots=2)
    solutions = example_paths.cuda_solutions
    requests = [EvalRequest("ws", example_paths.relu_add_task, solutions / "relu_add_workspace"),
                EvalRequest("inline", example_paths.relu_add_task, solutions / "relu_add_inline.py"),
                EvalRequest("cublas", example_paths.linear_relu_task, solutions / "linear_relu_cublas")]
    with pool:
        results = list(pool.map(requests))
    for r in results:
        m = r.measurement
        assert m is not None and m.correct and m.runtime_us > 0, (r.id, r.task_error, m and m.error_detail)
        assert "lane_wait" in m.stage_seconds
    sections = sorted(lanes.timed_sections)
    assert len(sections) >= 3 and all(end <= start for (_, end), (start, _) in zip(sections, sections[1:]))
    device = lanes.devices[0]
    assert lanes.slot_s[device] >= lanes.busy_s[device] > lanes.timing_s[device] > 0
