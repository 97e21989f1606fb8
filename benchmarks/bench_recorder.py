"""Per-operator cost of the run worker's operator recorder (sandbox/native/op_recorder.cpp).

Times tight Python loops of a few cheap operators (a view, an allocation, an add; on the
device with --device cuda) in fresh processes: with no recorder, with the C++ recorder armed and
inside a call (the state every call of a solution runs in), and with the Python dispatch mode
that used to watch verified calls (for comparison). Settings alternate round by round; each
number is ns per operator call, the median and the minimum over rounds (on a shared host the
minimum is the steadier estimate); overheads are differences of minima.

Launch lines:
  CPU:    python benchmarks/bench_recorder.py --rounds 7
  1 GPU:  python benchmarks/bench_recorder.py --device cuda --rounds 7
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SETTINGS = ("none", "recorder", "dispatch_mode")
CALLS = 20000

CHILD = r"""
import json, sys, time
import torch
sys.path.insert(0, {root!r})
from sandbox.guards import ALLOWED_OPS, ForwardGuard  # noqa: F401  (the recorder's allowed set)
from sandbox.recorder import OpRecorder

setting, device, calls = {setting!r}, torch.device({device!r}), {calls}
torch.set_num_threads(1)
x = torch.randn(1024, device=device)
ops = {{"view": lambda: x.view(-1), "empty_like": lambda: torch.empty_like(x), "add": lambda: torch.add(x, x)}}
if setting == "recorder":
    recorder = OpRecorder({library!r}, ALLOWED_OPS)
    recorder.arm()
    recorder.in_call(True)
context = None
if setting == "dispatch_mode":
    from torch.utils._python_dispatch import TorchDispatchMode

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {{}}))

    context = Mode()
    context.__enter__()
result = {{}}
for name, op in ops.items():
    for _ in range(calls // 10):
        op()
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        op()
    if device.type == "cuda":
        torch.cuda.synchronize()
    result[name] = (time.perf_counter() - start) / calls * 1e9
print(json.dumps(result))
"""


def one_round(setting: str, device: str, library: str) -> dict:
    code = CHILD.format(root=str(ROOT), setting=setting, device=device, calls=CALLS, library=library)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    from sandbox.recorder import library_path

    with tempfile.TemporaryDirectory(prefix="bench-recorder-") as cache:
        library = str(library_path(Path(cache)))
        rounds = {s: [] for s in SETTINGS}
        for _ in range(args.rounds):
            for setting in SETTINGS:
                rounds[setting].append(one_round(setting, args.device, library))
    report = {s: {op: {"median": statistics.median(r[op] for r in rs), "min": min(r[op] for r in rs)}
                  for op in rs[0]} for s, rs in rounds.items()}
    for setting in ("recorder", "dispatch_mode"):
        report[f"{setting}_overhead_ns"] = {op: report[setting][op]["min"] - report["none"][op]["min"]
                                            for op in report["none"]}
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
