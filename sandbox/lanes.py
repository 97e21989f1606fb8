"""Device lanes of a pool: build slots, lane slots per device, and each device's exclusive
timing section.

    lane of one device (lane_slots = 2)      [shared: any number at once]  <exclusive: nothing else>
    slot 1  [reference] [compile]       <baselines> [verify: trial, check, trial ...] <timing>
    slot 2     [reference] [compile] waits ...      [verify ...]         waits        [verify ...

An evaluation holds one *lane slot* of a device for its whole device phase (its workers live
there), so at most ``lane_slots`` evaluations use a device at once. Within it, the judge holds
the device's work lock *shared* around each command it gives a worker (start, "next", "check":
the worker's device work runs until its next report, after which it waits for the judge) and
around torch.compile's untimed compile work for the baselines (``compiling``: tens of seconds
of host work that several evaluations do at once, but never during a timing), and
*exclusive* around each timed section (the reference's baselines; the run worker's timed runs
with their spot checks and post-timing trials), together with the device gate that training
honours. Timing therefore waits for the other evaluations' commands in flight to report, and
their next commands wait until timing is over: a timed run never shares its device with another
evaluation's work, nor with a training step, while verification of several evaluations (and
training) overlap. The locks are machine-wide flocks (sandbox/gate.py), so this holds against
other pools on the machine too. While a section times, the run workers of the other evaluations
on the device are stopped (SIGSTOP, every thread stopped before the section starts): solution
code that left a thread behind cannot run it during someone else's timing. With one slot, a lane is exclusive to one evaluation, as before.
Within one pool, timed sections go before new compiles: a compile starts only when no timed
section waits for its device (``compiling``), so the timings that queued behind a round of
compiles run back to back rather than one per round.
"""
from __future__ import annotations

import contextlib
import threading
import time
from collections import defaultdict
from pathlib import Path

from .config import SandboxConfig
from .errors import TaskError
from .gate import DeviceGate, GateCancelled, gate_key, work_key
from .placement import CpuPlan, available_cpus, plan_cpus
from .process import Cancelled, WorkerProcess, freeze_tree, thaw

# How often waits for a slot or lane look at the cancel flag.
POLL_S = 0.05


class DeviceLanes:
    """Build slots and device lanes shared by every evaluation of one pool (thread-safe)."""

    pooled = True

    def __init__(self, devices: list[str], build_slots: int, lane_cpus: int = 0, lane_slots: int = 1,
                 harness_beside_timing: bool = False):
        if not devices:
            raise TaskError("no device to time on: CUDA_VISIBLE_DEVICES hides every GPU (or none exists)")
        self.devices = list(devices)
        self.lane_slots = max(1, int(lane_slots))
        # The reference worker's commands (trusted harness work) take no part in the work lock:
        # they run beside timed sections, as builds do (SandboxConfig.timing.harness_beside_timing).
        self.harness_beside_timing = harness_beside_timing
        # Host cores per lane and for builds (empty when too few cores: see sandbox.placement).
        self.cpus, self.unpinned_because = plan_cpus(self.devices, lane_cpus, available_cpus())
        self._builds = threading.Semaphore(max(1, build_slots))
        self._cond = threading.Condition()
        self._holders = {device: 0 for device in self.devices}
        self._busy_since: dict[str, float] = {}
        self._sessions: dict[str, list[LaneSession]] = defaultdict(list)
        # Per device (the benchmark's busy shares): seconds at least one slot was held, seconds
        # of slot holds summed over evaluations, seconds the timing section was held; how many
        # evaluations held a slot, how many timed sections ran.
        self.busy_s: dict[str, float] = defaultdict(float)
        self.slot_s: dict[str, float] = defaultdict(float)
        self.timing_s: dict[str, float] = defaultdict(float)
        self.served: dict[str, int] = defaultdict(int)
        self.timed: dict[str, int] = defaultdict(int)
        # Per device: seconds of compile holds summed over evaluations, and how many there were.
        self.compile_s: dict[str, float] = defaultdict(float)
        self.compiles: dict[str, int] = defaultdict(int)
        # Per device: timed sections asked for and not yet over (new compiles wait for none).
        self._timings_wanted: dict[str, int] = defaultdict(int)
        self.build_s = 0.0
        self._toolchains: dict = {}

    @contextlib.contextmanager
    def build_slot(self, cancel: threading.Event):
        _acquire(lambda: self._builds.acquire(timeout=POLL_S), cancel, "a build slot")
        start = time.monotonic()
        try:
            yield
        finally:
            self._builds.release()
            with self._cond:
                self.build_s += time.monotonic() - start

    @contextlib.contextmanager
    def device(self, cancel: threading.Event):
        """A slot of the least used device with one free: the evaluation's device phase."""
        device, start = self._take_slot(cancel)
        try:
            yield device
        finally:
            with self._cond:
                now = time.monotonic()
                self._holders[device] -= 1
                self.slot_s[device] += now - start
                self.served[device] += 1
                if not self._holders[device]:
                    self.busy_s[device] += now - self._busy_since.pop(device)
                self._cond.notify_all()

    def _take_slot(self, cancel: threading.Event) -> tuple[str, float]:
        with self._cond:
            while True:
                free = [d for d in self.devices if self._holders[d] < self.lane_slots]
                if free:
                    device, now = min(free, key=lambda d: (self._holders[d], self.served[d])), time.monotonic()
                    if not self._holders[device]:
                        self._busy_since[device] = now
                    self._holders[device] += 1
                    return device, now
                if cancel.is_set():
                    raise Cancelled("evaluation cancelled while waiting for a device lane")
                self._cond.wait(POLL_S)

    def in_use(self) -> dict[str, int]:
        """Evaluations in their device phase, per device."""
        with self._cond:
            return dict(self._holders)

    @contextlib.contextmanager
    def session(self, device: str, cancel: threading.Event):
        """One evaluation's use of its slot on ``device`` (see LaneSession)."""
        lane = LaneSession(self, device, cancel)
        with self._cond:
            self._sessions[device].append(lane)
        try:
            yield lane
        finally:
            with self._cond:
                self._sessions[device].remove(lane)

    @contextlib.contextmanager
    def work(self, device: str, cancel: threading.Event):
        """Device work of one command: shared with other evaluations' work, never with timing."""
        with _gate(work_key(_gate_of(device)), cancel, shared=True):
            yield

    @contextlib.contextmanager
    def compiling(self, device: str, cancel: threading.Event):
        """torch.compile's untimed compile work for a baseline: shared, like a command's work, with
        other evaluations' work and compiles (its host work would skew a timing, so never during
        one), and counted apart. It starts only once no timed section of this pool waits for the
        device: a timing waits for every compile in flight (tens of seconds), so timed sections
        that queued meanwhile go first, together, instead of each waiting for a new round."""
        self._await_no_timing(device, cancel)
        with self.work(device, cancel):
            start = time.monotonic()
            try:
                yield
            finally:
                with self._cond:
                    self.compile_s[device] += time.monotonic() - start
                    self.compiles[device] += 1

    @contextlib.contextmanager
    def timing(self, device: str, cancel: threading.Event, timer: "LaneSession"):
        """A timed section: the device gate (training waits), then the work lock exclusively
        (other evaluations' commands in flight report first), then the other evaluations' run
        workers on the device stopped until it ends."""
        key = _gate_of(device)
        with self._cond:
            self._timings_wanted[device] += 1
        try:
            with _gate(key, cancel), _gate(work_key(key), cancel):
                start = time.monotonic()
                stopped = self._freeze_others(device, timer)
                try:
                    yield
                finally:
                    thaw(stopped)
                    with self._cond:
                        self.timing_s[device] += time.monotonic() - start
                        self.timed[device] += 1
        finally:
            with self._cond:
                self._timings_wanted[device] -= 1
                self._cond.notify_all()

    def _await_no_timing(self, device: str, cancel: threading.Event) -> None:
        with self._cond:
            wait_until(self._cond, lambda: not self._timings_wanted[device], cancel,
                       "evaluation cancelled while waiting for the timed sections before its compile")

    def _freeze_others(self, device: str, timer: "LaneSession") -> list[int]:
        with self._cond:
            workers = [w for lane in self._sessions[device] if lane is not timer for w in lane.solution_workers]
        return [pid for worker in workers for pid in freeze_tree(worker.proc)]

    def install_cached_build(self, solution_dir: Path, cfg: SandboxConfig) -> bool:
        """A workspace whose linked module is cached needs no build worker (a cache hit)."""
        from .build import cached_module, make_toolchain
        from .errors import CompileError
        from .solution import read_solution

        try:
            if not read_solution(solution_dir).has_kernels:
                return False
            key = (cfg.backend, cfg.cuda_arch, cfg.cxx_flags, cfg.nvcc_flags)
            if key not in self._toolchains:
                self._toolchains[key] = make_toolchain(cfg.backend, cfg.cuda_arch or None, cfg.cxx_flags,
                                                       cfg.nvcc_flags)
            return cached_module(solution_dir, solution_dir / "build", self._toolchains[key],
                                 cfg.cache_root) is not None
        except (CompileError, OSError, ValueError):
            return False


class LaneSession:
    """One evaluation on its lane slot. ``work()`` around each command to a worker and
    ``compiling()`` around a baseline's compile (both free inside a timed section, which already
    excludes everything else), ``timing()`` around each timed section; ``clock()`` runs only
    while the evaluation is not waiting for its device, so that stage deadlines do not count the
    time other evaluations' timing took."""

    def __init__(self, lanes: DeviceLanes | None, device: str, cancel: threading.Event):
        self.lanes, self.device, self.cancel = lanes, device, cancel
        self.waited_s = 0.0
        self.timing_now = False
        # Workers running solution code on the device: stopped while another evaluation times.
        self.solution_workers: list[WorkerProcess] = []

    def clock(self) -> float:
        return time.monotonic() - self.waited_s

    def work(self):
        return self._shared("work")

    def harness(self):
        """A reference-worker command: device work like any other (``work``), unless the lanes
        let the harness run beside timed sections; solution code always waits (``work``)."""
        if self.lanes is not None and self.lanes.harness_beside_timing:
            return contextlib.nullcontext()
        return self.work()

    def compiling(self):
        return self._shared("compiling")

    @contextlib.contextmanager
    def _shared(self, hold: str):
        """The lanes' shared hold ``hold`` ("work" or "compiling"); its wait counts as waiting."""
        if self.lanes is None or self.timing_now:
            yield
            return
        start = time.monotonic()
        with getattr(self.lanes, hold)(self.device, self.cancel):
            self.waited_s += time.monotonic() - start
            yield

    @contextlib.contextmanager
    def timing(self):
        if self.lanes is None:
            yield
            return
        start = time.monotonic()
        with self.lanes.timing(self.device, self.cancel, self):
            self.waited_s += time.monotonic() - start
            self.timing_now = True
            try:
                yield
            finally:
                self.timing_now = False


class SoloLanes:
    """Placement for an evaluation that has the machine to itself: no slots to wait for, the
    configured device, workers started at once, no locks."""

    pooled = False
    # Alone on the machine: nothing to keep apart, nothing pinned.
    cpus = CpuPlan()

    def __init__(self, cfg: SandboxConfig):
        self.device_name = str(cfg.device_index)

    @contextlib.contextmanager
    def build_slot(self, cancel: threading.Event):
        yield

    @contextlib.contextmanager
    def device(self, cancel: threading.Event):
        yield self.device_name

    @contextlib.contextmanager
    def session(self, device: str, cancel: threading.Event):
        yield LaneSession(None, device, cancel)

    def install_cached_build(self, solution_dir: Path, cfg: SandboxConfig) -> bool:
        return False


def _gate_of(device: str) -> str:
    return gate_key("cpu" if device == "-" else "cuda", device)


@contextlib.contextmanager
def _gate(key: str, cancel: threading.Event, shared: bool = False):
    gate = DeviceGate(key, cancelled=cancel.is_set, shared=shared)
    try:
        gate.__enter__()
    except GateCancelled as exc:
        raise Cancelled(str(exc)) from None
    try:
        yield
    finally:
        gate.__exit__()


def wait_until(cond: threading.Condition, ready, cancel: threading.Event, cancelled_message: str) -> None:
    """Wait on ``cond`` (held by the caller) until ``ready()``; Cancelled once ``cancel`` is set."""
    while not ready():
        if cancel.is_set():
            raise Cancelled(cancelled_message)
        cond.wait(POLL_S)


def _acquire(try_once, cancel: threading.Event, what: str) -> None:
    while not try_once():
        if cancel.is_set():
            raise Cancelled(f"evaluation cancelled while waiting for {what}")
