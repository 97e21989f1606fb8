"""The lane scheduler alone: how many baseline-shaped evaluations per second one device's lane
lets through, with the real DeviceLanes and its machine-wide locks and stand-ins (sleeps) for the
work inside each hold, so that the number is the scheduler's, not a GPU's.

Each evaluation: a reference command (``work``, shared), torch.compile's compile work
(``compiling``, shared), then its timed section (``timing``, exclusive), the shape of
``python -m sandbox baselines --workers N``. The lower bound on the wall is
tasks x timing_s (timed sections never overlap) plus one compile round.

    python benchmarks/bench_lanes.py --workers 8 --tasks 48 --compile-s 0.8 --timing-s 0.1
"""
from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor


def one_evaluation(lanes, device: str, args) -> None:
    never = threading.Event()
    with lanes.device(never), lanes.session(device, never) as lane:
        with lane.work():
            time.sleep(args.reference_s)
        with lane.compiling():
            time.sleep(args.compile_s)
        with lane.timing():
            time.sleep(args.timing_s)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=8, help="evaluations at once (lane slots)")
    parser.add_argument("--tasks", type=int, default=48, help="evaluations in all")
    parser.add_argument("--reference-s", type=float, default=0.05, help="seconds of the reference command")
    parser.add_argument("--compile-s", type=float, default=0.8, help="seconds of compile work")
    parser.add_argument("--timing-s", type=float, default=0.1, help="seconds of the timed section")
    args = parser.parse_args(argv)
    os.environ.setdefault("CUDA_AGENT_GATE_DIR", tempfile.mkdtemp(prefix="bench-lanes-"))
    from sandbox.lanes import DeviceLanes

    lanes = DeviceLanes(["bench"], build_slots=1, lane_slots=args.workers)
    start = time.monotonic()
    with ThreadPoolExecutor(args.workers) as pool:
        for future in [pool.submit(one_evaluation, lanes, "bench", args) for _ in range(args.tasks)]:
            future.result()
    wall = time.monotonic() - start
    bound = args.tasks * args.timing_s + args.compile_s + args.reference_s
    print(f"{args.tasks} evaluations, {args.workers} at once: wall {wall:.2f} s, {wall / args.tasks:.3f} s each "
          f"(lower bound {bound:.2f} s; one at a time "
          f"{args.tasks * (args.reference_s + args.compile_s + args.timing_s):.2f} s); "
          f"timed sections held {lanes.timing_s['bench']:.2f} s, compiles {lanes.compiles['bench']}")


if __name__ == "__main__":
    main()
