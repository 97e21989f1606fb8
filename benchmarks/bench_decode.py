"""Decode speed of an actor: milliseconds per generated token step, the model's own forward
(``sampling.generate_replies``) against the static-cache decoder (``static_decode``: CUDA graphs
on a GPU), for several batch sizes, with the same prompts and budgets. Optionally with every other
host core busy (``--load``), as the CPU sandbox keeps them during rollouts.

    # CPU (small sizes: the static decoder without graphs)
    python benchmarks/bench_decode.py --actor /tmp/family_actor --device cpu --rows 1,4 --prompt 256 --steps 64
    # 1 GPU (the family actor, as family_runs.sh unpacks it)
    tar xzf data/family/actor_small.tar.gz -C /tmp
    python benchmarks/bench_decode.py --actor /tmp/family_actor --device cuda --rows 1,8,16 --load --out decode.json
Prints one line per (decoder, rows) and writes them as JSON to --out.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def busy(stop) -> None:
    """One core's worth of host load until ``stop`` is set."""
    x = 0
    while not stop.is_set():
        for _ in range(100000):
            x += 1


def time_decoder(generate, rows: int, prompt: int, steps: int, repeats: int, device) -> list[float]:
    """Milliseconds per step of ``repeats`` batches of ``rows`` prompts (no stop id: every reply
    runs to ``steps``), after one untimed batch (graph capture, allocator warm-up)."""
    import torch

    from src.agent.sampling import SamplingParams, seeded_generator

    generator = seeded_generator(device, 0)
    prompts = [[3 + (r * 7 + i) % 200 for i in range(prompt - 13 * r)] for r in range(rows)]
    out = []
    for attempt in range(repeats + 1):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        generate(prompts, [steps] * rows, [], 0, SamplingParams(1.0), generator)
        if device.type == "cuda":
            torch.cuda.synchronize()
        if attempt:
            out.append((time.perf_counter() - start) / steps * 1e3)
    return out


def main(argv=None) -> int:
    import torch
    from transformers import AutoModelForCausalLM

    from src.agent.sampling import generate_replies
    from src.agent.static_decode import LlamaStaticDecoder

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--actor", required=True, help="an HF model directory")
    p.add_argument("--device", default="cuda")
    p.add_argument("--rows", default="1,8,16", help="batch sizes")
    p.add_argument("--prompt", type=int, default=1500, help="prompt tokens of the longest row")
    p.add_argument("--steps", type=int, default=512, help="tokens generated per reply")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--load", action="store_true", help="keep every other host core busy meanwhile")
    p.add_argument("--out", default="")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    model = AutoModelForCausalLM.from_pretrained(args.actor, dtype=torch.float32).to(device).eval()
    decoders = {"hf": lambda *a: generate_replies(model, *a), "static": LlamaStaticDecoder(model).generate}
    stop, workers = mp.Event(), []
    if args.load:
        workers = [mp.Process(target=busy, args=(stop,), daemon=True) for _ in range(max(1, os.cpu_count() - 1))]
        for w in workers:
            w.start()
    results = []
    try:
        for rows in [int(r) for r in args.rows.split(",")]:
            for name, generate in decoders.items():
                ms = time_decoder(generate, rows, args.prompt, args.steps, args.repeats, device)
                row = {"decoder": name, "rows": rows, "ms_per_step": statistics.median(ms),
                       "min": min(ms), "max": max(ms), "tokens_per_s": rows * 1e3 / statistics.median(ms)}
                results.append(row)
                print(f"{name:6s} rows {rows:3d}: {row['ms_per_step']:.2f} ms/step (min {row['min']:.2f}, max "
                      f"{row['max']:.2f}), {row['tokens_per_s']:.0f} tokens/s", flush=True)
    finally:
        stop.set()
        for w in workers:
            w.join()
    meta = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "torch": torch.__version__, "load": args.load, "prompt": args.prompt, "steps": args.steps}
    if args.out:
        Path(args.out).write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
