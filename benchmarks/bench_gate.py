"""Device gate: how much does training on the timing device disturb kernel timing, with and
without the gate (sandbox/gate.py)?

The same solutions are judged through a sandbox pool, repeatedly, in three settings:
  idle       nothing else on the device;
  load/off   a training-like load runs on the same device all the time, gate not taken
             (what happens with device_gate=never);
  load/gate  the same load, each chunk of work holding the device gate (device_gate=auto: the
             trainer holds it around each generation batch and each update).
The load is a loop of large matmuls in chunks of --chunk-ms (a generation batch or an update's
micro-step is that kind of work), in this process, on the device the pool times on. Reported per
setting and solution: the measured runtime's median, min, max and relative spread
((max - min) / median), plus the load's throughput (what the gate costs training) and the time
it waited for the gate.

Launch lines:
  1 GPU:  python benchmarks/bench_gate.py --backend cuda --rounds 8 --out gate_cuda.json
  CPU:    python benchmarks/bench_gate.py --backend cpu --rounds 4 --size 512 --out gate_cpu.json
  N GPUs: the gate is per device; this measures one (pick it with CUDA_VISIBLE_DEVICES).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from sandbox import SandboxConfig  # noqa: E402
from sandbox.gate import DeviceGate, gate_key_for_torch_device  # noqa: E402
from sandbox.pool import EvalRequest, SandboxPool  # noqa: E402

# The solutions bench_guards judges: the same cases, one list.
from benchmarks.bench_guards import CASES, EXAMPLES  # noqa: E402


class MatmulLoad:
    """Back-to-back matmuls on ``device`` in chunks of about ``chunk_ms``, each chunk inside
    ``gate`` (or nothing), until stopped; counts the floating-point work it got done."""

    def __init__(self, device: torch.device, size: int, chunk_ms: float, gate):
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        self.a = torch.randn(size, size, device=device, dtype=dtype)
        self.b = torch.randn(size, size, device=device, dtype=dtype)
        self.device, self.chunk_s, self.gate = device, chunk_ms / 1000, gate
        self.flops, self.busy_s = 0.0, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        per_matmul = 2.0 * self.a.shape[0] ** 3
        while not self._stop.is_set():
            with self.gate:
                start = time.monotonic()
                while time.monotonic() - start < self.chunk_s:
                    self.a @ self.b
                    self.flops += per_matmul
                if self.device.type == "cuda":
                    torch.cuda.synchronize(self.device)
                self.busy_s += time.monotonic() - start

    def __enter__(self) -> "MatmulLoad":
        self.started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.wall_s = time.monotonic() - self.started


def judge(pool: SandboxPool, backend: str, rounds: int, cases: int = 0) -> dict[str, list[float]]:
    runtimes: dict[str, list[float]] = {}
    for task_name, solution_name in CASES[backend][:cases or None]:
        task = EXAMPLES / "tasks" / f"{task_name}.py"
        solution = EXAMPLES / "solutions" / backend / solution_name
        for i in range(rounds):
            result = pool.map([EvalRequest(f"{solution_name}-{i}", task, solution)])
            m = next(result).measurement
            if m is None or not m.correct:
                raise SystemExit(f"{solution_name} was not judged correct: {getattr(m, 'error', None)}")
            runtimes.setdefault(solution_name, []).append(m.runtime_us)
    return runtimes


def spread(values: list[float]) -> dict[str, float]:
    median = statistics.median(values)
    return {"median_us": median, "min_us": min(values), "max_us": max(values),
            "spread": (max(values) - min(values)) / median, "n": len(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--rounds", type=int, default=8, help="evaluations per solution and setting")
    parser.add_argument("--size", type=int, default=8192, help="matmul size of the load")
    parser.add_argument("--chunk-ms", type=float, default=50.0, help="work per gate hold of the load")
    parser.add_argument("--cases", type=int, default=0, help="judge only the first N of bench_guards' cases (0: all)")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    device = torch.device("cuda", 0) if args.backend == "cuda" else torch.device("cpu")
    pool = SandboxPool(SandboxConfig(backend=args.backend))
    report: dict = {"backend": args.backend, "size": args.size, "chunk_ms": args.chunk_ms, "settings": {}}
    try:
        judge(pool, args.backend, 1, args.cases)  # builds and baselines into the cache
        settings = {"idle": None, "load/off": contextlib.nullcontext(),
                    "load/gate": DeviceGate(gate_key_for_torch_device(device))}
        for name, gate in settings.items():
            start = time.monotonic()
            if gate is None:
                runtimes, load = judge(pool, args.backend, args.rounds, args.cases), None
            else:
                with MatmulLoad(device, args.size, args.chunk_ms, gate) as load:
                    runtimes = judge(pool, args.backend, args.rounds, args.cases)
            row = {"wall_s": time.monotonic() - start, "runtime": {k: spread(v) for k, v in runtimes.items()}}
            if load is not None:
                row["load_tflops"] = load.flops / load.wall_s / 1e12
                row["load_busy_share"] = load.busy_s / load.wall_s
                row["load_gate_wait_s"] = getattr(gate, "waited_s", 0.0)
            report["settings"][name] = row
            print(name, json.dumps(row), flush=True)
    finally:
        pool.close(cancel_pending=True)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
