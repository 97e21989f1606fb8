"""CPU placement: lanes get cores of their own, builds the rest; held workers move to their lane's."""
import os
import threading
import time

import pytest

from sandbox.placement import CpuPlan, format_cpus, parse_cpus, pin_process, plan_cpus


def test_two_lanes_on_32_cores_get_the_top_cores_and_builds_the_rest():
    plan, why = plan_cpus(["0", "1"], 2, range(32))
    assert why == ""
    assert plan.for_lane("0") == (28, 29) and plan.for_lane("1") == (30, 31)
    assert plan.builds == tuple(range(28))
    assert plan.pinned


def test_a_cpuset_with_holes_is_respected():
    plan, _ = plan_cpus(["3"], 2, [0, 2, 4, 6, 8, 10])
    assert plan.for_lane("3") == (8, 10)
    assert plan.builds == (0, 2, 4, 6)
    assert plan.for_lane("0") == ()  # not a lane of this plan


@pytest.mark.parametrize("cores, per_lane", [(2, 2), (5, 2), (16, 0)])
def test_too_few_cores_or_zero_pin_nothing_and_say_why(cores, per_lane):
    plan, why = plan_cpus(["0", "1"], per_lane, range(cores))
    assert plan == CpuPlan() and not plan.pinned
    assert why


def test_the_wire_form_round_trips():
    assert parse_cpus(format_cpus((3, 4, 17))) == (3, 4, 17)
    assert format_cpus(()) == "-" and parse_cpus("-") == ()


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux affinity and 2 cores")
def test_pinning_moves_every_thread_not_only_the_caller():
    original = os.sched_getaffinity(0)
    target = {min(original)}
    stop = threading.Event()
    seen: dict = {}

    def other() -> None:
        seen["tid"] = threading.get_native_id()
        stop.wait(10)

    t = threading.Thread(target=other)
    t.start()
    while "tid" not in seen:
        time.sleep(0.01)
    try:
        pin_process(target)
        assert os.sched_getaffinity(0) == target
        assert os.sched_getaffinity(seen["tid"]) == target
    finally:
        stop.set()
        t.join()
        pin_process(original)
    assert os.sched_getaffinity(0) == original
