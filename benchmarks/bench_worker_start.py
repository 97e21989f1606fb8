"""What starting one sandbox worker costs before it does any work, and what a fork server would
save: a fresh interpreter importing ``sandbox.worker`` (what every worker does today; torch is
most of it) against ``os.fork()`` of a process that has already imported it. Wall and CPU seconds
(the child's user + system time), median and range over REPEATS.

An evaluation starts three workers (build, reference, run), so three of these per judgement. Not
measured here: what a fork server must add to be equivalent (namespaces, settings read when a
library loads, e.g. OMP_NUM_THREADS and glibc's MALLOC_* variables: docs/sandbox.md).

Launch lines (from the repository root):
    # CPU:
    python benchmarks/bench_worker_start.py --repeats 10 --out worker_start.json
    # one GPU host (the CUDA build of torch imports more):
    python3 benchmarks/bench_worker_start.py --repeats 10 --out $OUT/worker_start.json
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
IMPORT = "import sandbox.worker"


def child_seconds(start: Callable[[], None]) -> tuple[float, float]:
    """(wall, CPU) seconds of one child started and reaped by ``start``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    start()
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def fresh_interpreter() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run([sys.executable, "-c", IMPORT], cwd=ROOT, env=env, check=True)


def fork_of_loaded() -> None:
    pid = os.fork()
    if pid == 0:
        import torch

        torch.ones(4).add_(1)  # the child can use what it inherited
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        raise RuntimeError(f"forked child ended with status {status}")


def summary(samples: list[tuple[float, float]]) -> dict[str, float]:
    walls, cpus = [w for w, _ in samples], [c for _, c in samples]
    return {"wall_median_s": statistics.median(walls), "wall_min_s": min(walls), "wall_max_s": max(walls),
            "cpu_median_s": statistics.median(cpus), "cpu_min_s": min(cpus), "cpu_max_s": max(cpus),
            "n": len(samples)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--out", default="", help="write the results as JSON here too")
    args = p.parse_args(argv)
    if args.repeats < 1:
        print(f"bench_worker_start: error: --repeats must be at least 1, got {args.repeats}", file=sys.stderr)
        return 2
    fresh = [child_seconds(fresh_interpreter) for _ in range(args.repeats)]
    sys.path.insert(0, str(ROOT))
    __import__("sandbox.worker")
    threads = len(os.listdir("/proc/self/task")) if Path("/proc/self/task").is_dir() else None
    forked = [child_seconds(fork_of_loaded) for _ in range(args.repeats)]
    result = {"fresh_interpreter": summary(fresh), "fork_of_loaded": summary(forked),
              # fork() copies only the calling thread: threads the imports started are a hazard.
              "threads_after_import": threads, "cpus": os.cpu_count(), "python": sys.version.split()[0]}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
