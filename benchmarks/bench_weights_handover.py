"""How long a task's weights take from the reference worker to the run worker: the old way (a
torch.save file in the evaluation's directory, torch.load) against sandbox.weights (a sealed
memfd, mapped). One thread, as the workers run. Results: docs/benchmarks.md.

    python benchmarks/bench_weights_handover.py --task .kb/level2/56_Matmul_Sigmoid_Sum.py
    python benchmarks/bench_weights_handover.py --task .kb/level3/2_ShallowWideMLP.py --dir /tmp
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch

from sandbox.inputs import load_module
from sandbox.weights import read_weights, weights_memory, write_weights


def seconds(action) -> tuple[float, object]:
    start = time.perf_counter()
    result = action()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", required=True, help="a KernelBench-format task file")
    parser.add_argument("--dir", default=None, help="where the file of the old way goes (default: the temp dir)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    task = load_module(Path(args.task), "model")
    init_inputs = task.get_init_inputs()
    torch.manual_seed(0)
    build_s, model = seconds(lambda: task.Model(*init_inputs))
    gb = sum(t.numel() * t.element_size() for t in model.state_dict().values()) / 1e9
    print(f"{Path(args.task).name}: {gb:.2f} GB of weights, Model built in {build_s:.1f} s")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "init.pt"
        state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        save_s, _ = seconds(lambda: torch.save({"init_inputs": init_inputs, "state_dict": state}, path))
        load_s, loaded = seconds(lambda: torch.load(path, weights_only=True))
        copy_s, _ = seconds(lambda: model.load_state_dict(loaded["state_dict"]))
        del loaded, state
    print(f"file   : save {save_s:.2f} s, load {load_s:.2f} s, load_state_dict {copy_s:.2f} s")
    fd = weights_memory()
    try:
        write_s, _ = seconds(lambda: write_weights(os.dup(fd), init_inputs, model))
        read_s, mapped = seconds(lambda: read_weights(os.dup(fd)))
        copy_s, _ = seconds(lambda: model.load_state_dict(mapped["state_dict"]))
        del mapped
    finally:
        os.close(fd)
    print(f"memfd  : write+seal {write_s:.2f} s, map {read_s:.2f} s, load_state_dict {copy_s:.2f} s")


if __name__ == "__main__":
    main()
