"""What a family actor (scripts/make_family_actor.py, or any stage's exported actor) does on its
own, before any RL: episodes on training and held-out tasks of the family, at each sampling
temperature, through the real CPU sandbox; the same rollout/ metrics the trainer logs (reward
mean, pass rate, faster-than-compile rate, tool error rate, ...) per split, agent mode and
temperature. RL needs the starting actor's rollouts to earn different rewards: an actor whose
every episode scores -1 gives warm-up PPO no signal and RFT nothing to keep.

Launch lines (from the repository root; the tasks are the CPU family, so the sandbox is the CPU
one; the actor generates on --device):
    # CPU:
    python scripts/eval_family_actor.py --actor outputs/family/actor --max-tasks 4 --temperatures 0
    # One GPU (generation there, the sandbox on the host's cores):
    python scripts/eval_family_actor.py --actor outputs/family/actor --device cuda --max-tasks 16 \\
        --temperatures 0,0.5,1 --modes single_turn,multi_turn --workers 12

Writes --out (default <actor>/eval.json): one entry per (split, mode, temperature) with the
metrics, the reward histogram and the stop reasons; prints one line per entry. Every episode
goes to <out>.trajectories.jsonl (trajectory rows with their split and temperature) for reading.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import tempfile
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from make_family_actor import multi_turn_config, single_turn_config  # noqa: E402

from data_gen.dataset import load_tasks  # noqa: E402
from sandbox.config import SandboxConfig, TimingConfig  # noqa: E402
from sandbox.pool import SandboxPool  # noqa: E402
from src.agent import HFPolicy, TrajectoryWriter, run_episodes  # noqa: E402
from src.agent.teacher import write_tasks  # noqa: E402
from src.data.rollout import rollout_metrics  # noqa: E402

SPLITS = ("train", "heldout")
MODES = ("single_turn", "multi_turn")


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--actor", required=True, help="a saved actor (save_pretrained directory)")
    p.add_argument("--tasks", default=str(ROOT / "data" / "family" / "cpu" / "tasks.parquet"), help="family parquet")
    p.add_argument("--splits", default=",".join(SPLITS), help=f"comma-separated: {', '.join(SPLITS)}")
    p.add_argument("--modes", default="single_turn", help=f"comma-separated: {', '.join(MODES)}")
    p.add_argument("--temperatures", default="0,1", help="comma-separated sampling temperatures (0: greedy)")
    p.add_argument("--max-tasks", type=int, default=8, help="first N tasks of each split (0: all)")
    p.add_argument("--max-turns", type=int, default=4, help="multi-turn episodes' turn limit")
    p.add_argument("--max-new-tokens", type=int, default=2048, help="per reply")
    p.add_argument("--device", default="cpu", help="where the actor generates (cpu, cuda)")
    p.add_argument("--workers", type=int, default=2, help="sandbox build workers; episodes in flight: twice that")
    p.add_argument("--cache-dir", default="", help="sandbox cache (default: $CUDA_AGENT_CACHE or ~/.cache)")
    p.add_argument("--no-compile-baseline", action="store_true", help="skip torch.compile baselines (faster)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="", help="report path (default: <actor>/eval.json)")
    args = p.parse_args(argv)
    if not Path(args.actor, "config.json").exists():
        usage_error(f"--actor {args.actor} holds no saved model (no config.json)")
    args.splits, args.modes = choices(args.splits, SPLITS, "--splits"), choices(args.modes, MODES, "--modes")
    try:
        args.temperatures = [float(t) for t in args.temperatures.split(",") if t.strip()]
    except ValueError:
        usage_error(f"--temperatures must be comma-separated numbers, got {args.temperatures!r}")
    if not args.temperatures or min(args.temperatures) < 0:
        usage_error(f"--temperatures must be numbers >= 0, got {args.temperatures}")
    return args


def usage_error(message: str) -> None:
    """Unusable input: one line on stderr, exit status 2."""
    print(f"eval_family_actor: error: {message}", file=sys.stderr)
    sys.exit(2)


def choices(text: str, allowed: tuple[str, ...], flag: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items or any(x not in allowed for x in items):
        usage_error(f"{flag} must be a comma-separated subset of {', '.join(allowed)}, got {text!r}")
    return items


def split_tasks(path: str, split: str, max_tasks: int, directory: Path) -> list[str]:
    """The split's task programs written as files (first ``max_tasks``; 0: all)."""
    rows = [r for r in load_tasks(path) if r.get("split") == split]
    rows = rows[:max_tasks] if max_tasks > 0 else rows
    if not rows:
        usage_error(f"{path} has no {split} task")
    return [str(p) for _, p in write_tasks(rows, directory / split)]


def agent_config(mode: str, args: argparse.Namespace):
    cfg = single_turn_config() if mode == "single_turn" else multi_turn_config()
    turns = 1 if mode == "single_turn" else args.max_turns
    return dataclasses.replace(cfg, max_turns=turns, max_new_tokens_per_turn=args.max_new_tokens)


def summarise(rows: list[dict], wall_s: float) -> dict[str, Any]:
    """The trainer's rollout/ metrics of these episodes, their rewards and stop reasons."""
    metrics = {k.split("/", 1)[1]: round(v, 4) for k, v in rollout_metrics(rows, rows, wall_s).items()
               if k.startswith("rollout/")}
    rewards = Counter(f"{r['reward']:g}" if r["reward"] is not None else "none" for r in rows)
    return metrics | {"rewards": dict(sorted(rewards.items())), "stop_reasons": dict(Counter(r["stop_reason"] for r in rows)),
                      "wall_s": round(wall_s, 1)}


def evaluate(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    tasks = {split: split_tasks(args.tasks, split, args.max_tasks, work) for split in args.splits}
    sandbox = SandboxConfig(backend="cpu", cache_dir=args.cache_dir, build_workers=args.workers,
                            compile_baseline=not args.no_compile_baseline, timing=TimingConfig(warmup=1, repeats=5))
    report = []
    with SandboxPool(sandbox) as pool:
        for temperature in args.temperatures:
            policy = HFPolicy(args.actor, device=args.device, temperature=temperature, seed=args.seed,
                              max_batch=2 * args.workers)
            for mode in args.modes:
                for split, paths in tasks.items():
                    start = time.monotonic()
                    writer = TrajectoryWriter(Path(args.out).with_suffix(".trajectories.jsonl"),
                                              extra={"split": split, "temperature": temperature})
                    trajs = asyncio.run(run_episodes(paths, policy, pool, agent_config(mode, args), "cpu",
                                                     reward="graduated", writer=writer,
                                                     concurrency=2 * args.workers))
                    entry = {"split": split, "mode": mode, "temperature": temperature, "tasks": len(paths)}
                    entry |= summarise([t.to_row() for t in trajs], time.monotonic() - start)
                    print(json.dumps(entry), flush=True)
                    report.append(entry)
    return report


def main(argv: Optional[list[str]] = None) -> list[dict[str, Any]]:
    args = parse_args(argv)
    args.out = args.out or str(Path(args.actor) / "eval.json")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).with_suffix(".trajectories.jsonl").unlink(missing_ok=True)  # a rerun's episodes only
    with tempfile.TemporaryDirectory(prefix="family_eval_") as work:
        report = evaluate(args, Path(work))
    command = "python scripts/eval_family_actor.py " + " ".join(argv if argv is not None else sys.argv[1:])
    Path(args.out).write_text(json.dumps({"command": command, "actor": args.actor, "results": report}, indent=1) + "\n")
    return report


if __name__ == "__main__":
    main()
