"""Device gates (sandbox/gate.py): timing lanes and training exclude each other on one device,
across processes and threads, fairly, and a lane's wait stays cancellable."""
from __future__ import annotations

import multiprocessing as mp
import threading
import time

import pytest
import torch

from sandbox.gate import DeviceGate, GateCancelled, gate_key, gate_key_for_torch_device
from sandbox.judge import Cancelled
from sandbox.pool import DeviceLanes


@pytest.fixture(autouse=True)
def own_gate_dir(tmp_path, monkeypatch):
    """Gates of these tests only (the machine's real gates belong to other pools)."""
    monkeypatch.setenv("CUDA_AGENT_GATE_DIR", str(tmp_path / "gates"))


def hold_in_child(key: str, gate_dir: str, seconds: float, held: mp.Event) -> None:
    import os

    os.environ["CUDA_AGENT_GATE_DIR"] = gate_dir
    with DeviceGate(key):
        held.set()
        time.sleep(seconds)


def test_a_gate_held_by_another_process_makes_this_one_wait(tmp_path):
    ctx = mp.get_context("spawn")
    held = ctx.Event()
    child = ctx.Process(target=hold_in_child, args=("cuda-0", str(tmp_path / "gates"), 1.0, held))
    child.start()
    try:
        assert held.wait(60), "the child never took the gate"
        start = time.monotonic()
        with DeviceGate("cuda-0"):
            waited = time.monotonic() - start
        with DeviceGate("cuda-1"):  # another device's gate is free
            pass
    finally:
        child.join(30)
    assert waited > 0.5


def test_a_dead_holder_releases_the_gate(tmp_path):
    ctx = mp.get_context("spawn")
    held = ctx.Event()
    child = ctx.Process(target=hold_in_child, args=("cpu", str(tmp_path / "gates"), 600.0, held))
    child.start()
    assert held.wait(60)
    child.kill()
    child.join(30)
    start = time.monotonic()
    with DeviceGate("cpu"):
        assert time.monotonic() - start < 5


def test_a_busy_holder_does_not_starve_a_waiter():
    """A generation loop lets go and asks again at once; a lane waiting meanwhile still gets in
    after about one hold, not whenever the loop happens to lose a race."""
    stop, loop_gate = threading.Event(), DeviceGate("cuda-0")

    def generation_loop():
        while not stop.is_set():
            with loop_gate:
                time.sleep(0.02)

    loop = threading.Thread(target=generation_loop)
    loop.start()
    try:
        time.sleep(0.1)
        waits = []
        for _ in range(5):
            start = time.monotonic()
            with DeviceGate("cuda-0", cancelled=lambda: False):
                waits.append(time.monotonic() - start)
    finally:
        stop.set()
        loop.join()
    assert max(waits) < 0.5, waits
    assert loop_gate.holds > 5


def test_a_cancelled_wait_gives_up_and_leaves_the_gate_usable():
    flag = threading.Event()
    with DeviceGate("cpu"):
        threading.Timer(0.2, flag.set).start()
        with pytest.raises(GateCancelled, match="cpu"):
            with DeviceGate("cpu", cancelled=flag.is_set):
                pass
    with DeviceGate("cpu", cancelled=flag.is_set):
        pass


def test_a_thread_may_hold_its_gate_twice_but_another_thread_waits():
    gate = DeviceGate("cpu")
    entered = threading.Event()

    def other():
        with DeviceGate("cpu"):
            entered.set()

    with gate:
        with gate:  # e.g. generation inside an update: must not wait for itself
            pass
        thread = threading.Thread(target=other)
        thread.start()
        assert not entered.wait(0.3), "the gate let a second thread in while held"
    thread.join(10)
    assert entered.is_set()


def test_a_pool_lane_holds_its_device_gate_while_it_times():
    """While training holds the gate, an evaluation gets its lane slot and does its other device
    work (commands), but its timed section waits; cancelled there, it is reported as cancelled."""
    lanes = DeviceLanes(["-"], build_slots=1)
    cancel, worked, timing = threading.Event(), threading.Event(), threading.Event()
    errors = []

    def evaluation():
        try:
            with lanes.device(cancel) as device, lanes.session(device, cancel) as lane:
                with lane.work():
                    worked.set()
                with lane.timing():
                    timing.set()
        except Cancelled as exc:
            errors.append(exc)

    with DeviceGate("cpu"):
        thread = threading.Thread(target=evaluation)
        thread.start()
        assert worked.wait(10), "a command waited for the gate"
        assert not timing.wait(0.3), "timing began while training held the gate"
        cancel.set()
        thread.join(10)
    assert errors and not timing.is_set()
    with lanes.device(threading.Event()) as device:  # the lane went back to the pool
        assert device == "-" and lanes.in_use() == {"-": 1}
    assert lanes.timed["-"] == 0


def test_shared_holders_overlap_and_an_exclusive_one_waits_for_them():
    readers_in = threading.Barrier(3, timeout=10)
    writer_in = threading.Event()

    def reader():
        with DeviceGate("cuda-0", shared=True):
            readers_in.wait()  # both readers inside at once (and the main thread)
            time.sleep(0.3)

    def writer():
        with DeviceGate("cuda-0", cancelled=lambda: False):
            writer_in.set()

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    readers_in.wait()
    late = threading.Thread(target=writer)
    late.start()
    assert not writer_in.wait(0.15), "the exclusive holder got in beside shared ones"
    for t in threads + [late]:
        t.join(10)
    assert writer_in.is_set()


def test_keys_name_devices_as_the_sandbox_lanes_do(monkeypatch):
    assert gate_key("cpu", "-") == "cpu"
    assert gate_key("cuda", "GPU-3f/../x") == "cuda-GPU-3f_.._x"  # no path out of the gate dir
    assert gate_key_for_torch_device(torch.device("cpu")) == "cpu"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert gate_key_for_torch_device(torch.device("cuda", 1)) == "cuda-1"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    # cuda:1 of this process is physical GPU 6: the lane the pool names "6".
    assert gate_key_for_torch_device(torch.device("cuda", 1)) == gate_key("cuda", "6") == "cuda-6"
