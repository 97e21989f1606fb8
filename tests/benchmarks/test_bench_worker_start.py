"""benchmarks/bench_worker_start.py: a forked child's seconds are its own (reaped, counted once),
the summary's maths, and a bad --repeats."""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_worker_start as bws  # noqa: E402


def test_a_childs_cpu_seconds_are_measured_and_the_summary_is_median_and_range():
    def busy_child() -> None:
        import os

        pid = os.fork()
        if pid == 0:
            end = time.process_time() + 0.2
            while time.process_time() < end:
                pass
            os._exit(0)
        os.waitpid(pid, 0)

    wall, cpu = bws.child_seconds(busy_child)
    assert cpu >= 0.19 and wall >= cpu * 0.9
    s = bws.summary([(1.0, 0.5), (3.0, 0.25), (2.0, 1.0)])
    assert (s["wall_median_s"], s["wall_min_s"], s["wall_max_s"]) == (2.0, 1.0, 3.0)
    assert (s["cpu_median_s"], s["cpu_min_s"], s["cpu_max_s"], s["n"]) == (0.5, 0.25, 1.0, 3)


def test_repeats_below_one_is_one_line_and_exit_2(capsys):
    assert bws.main(["--repeats", "0"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
