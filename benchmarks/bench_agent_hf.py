"""Agent-loop benchmark with a real small Hugging Face model, fully offline: multi-turn episodes
through the real sandbox pool, their throughput, and where the time goes (generation vs build
vs verify vs timing).

No pretrained weights can be reached on the GPU hosts, and a randomly initialised model never
writes a tool call, so the policy is made here (src/agent/offline_model.py):
  1. a byte-level BPE tokenizer is trained on what the episodes say (SKILL.md and the tool list,
     the tool schemas, the tasks, the expert's replies) and given a chat template;
  2. a scripted expert writes each known solution (examples/kernelbench_sample_solutions/<backend>)
     and compiles, verifies, profiles and finishes, in real episodes through the sandbox pool;
     the demonstrations whose final verdict is correct are kept;
  3. a fresh small Llama is behaviour-cloned on them (loss on the generated tokens only) and
     saved with save_pretrained (model + tokenizer) to --output-dir;
  4. HFPolicy loads that directory by path, as policy.model=PATH would, and runs --episodes
     episodes over the demonstrated tasks (cycled), --concurrency at a time, through the pool.
The model replays what it was shown; it is a smoke-scale policy that exercises the real loop,
not a capable one. The measured episodes find warm caches: the demonstrations built the same
files and timed the same baselines, as a long RL run does for content it has seen.

Time split (report["time_split_s"], summed over the measured episodes, so it adds up to their
summed episode seconds, which is the wall time when --concurrency is 1): generation (the model's
own work), generation_wait (queueing behind other episodes' generations when HFPolicy generates one
reply at a time), build, verify (reference outputs + correctness trials), timing (baselines +
timed runs), sandbox_overhead (waiting for a build slot or device lane, worker start-up) and
other (file tools, parsing, chat-template rendering, workspace set-up).

Stop reasons (report["outcomes"]["stop_reasons"]: episodes and share per reason, and
template_drift_share): how many episodes ended in template_drift (the target is under 1 %; token-in
/ token-out, docs/agent.md, leaves it to templates that fail at episode start). Measure it at the
sampling temperature training uses, e.g. on 1 GPU:
  python benchmarks/bench_agent_hf.py --backend cuda --tasks level1/1,level1/3,level2/2,level2/3 \
      --model-size small --episodes 100 --concurrency 8 --max-batch 8 --temperature 1.0 \
      --no-compile-baseline --out agent_hf_drift.json

Launch lines (run from the repository root; --out is the JSON report):
  CPU:    python benchmarks/bench_agent_hf.py --backend cpu --tasks level1/1,level2/2,level2/3 \\
              --model-size tiny --lr 2e-2 --batch-size 2 --train-steps 400 --episodes 3 \\
              --concurrency 1 --quick-sandbox --out agent_hf_cpu.json
  1 GPU:  python benchmarks/bench_agent_hf.py --backend cuda --tasks level1/1,level1/3,level2/2,level2/3 \\
              --model-size small --episodes 16 --concurrency 4 --no-compile-baseline --out agent_hf_cuda.json
  N GPUs: the model runs on --model-device and the pool times on every --sandbox-devices entry
          (default: every visible GPU), e.g. on 2 GPUs, the model alone on the second:
          CUDA_VISIBLE_DEVICES=0,1 python benchmarks/bench_agent_hf.py --backend cuda --model-size small \\
              --model-device cuda:1 --sandbox-devices 0 --episodes 32 --concurrency 8 --out agent_hf_2gpu.json
On one GPU the model's generation shares the device with the sandbox's timed runs. Each measured
episode holds a device lane for two evaluations (verify, profile): a few seconds per episode
whatever the model, so episodes per hour scale with lanes (GPUs), not with concurrency alone.
"""
from __future__ import annotations

import argparse
import contextlib
import asyncio
import json
import sys
import threading
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sandbox import SandboxConfig  # noqa: E402
from sandbox.config import TimingConfig  # noqa: E402
from sandbox.errors import SolutionError  # noqa: E402
from sandbox.pool import make_pool  # noqa: E402
from sandbox.solution import read_solution  # noqa: E402
from src.agent import AgentConfig, HFPolicy, Trajectory, TrajectoryWriter, run_episodes  # noqa: E402
from src.agent.offline_model import (MODEL_SIZES, behaviour_clone, build_chat_tokenizer, chat_corpus,  # noqa: E402
                                     demonstrated_correctly, demonstrations, save_policy, small_model_config)
from src.evaluation.kernelbench import load_problems  # noqa: E402
from src.evaluation.replay import replay_solutions  # noqa: E402

SAMPLE = ROOT / "examples" / "kernelbench_sample"
SAMPLE_SOLUTIONS = ROOT / "examples" / "kernelbench_sample_solutions"
SANDBOX_TOOLS = ("compile", "verify", "profile")
# The paper's reward scores every verdict (the report shows it; the benchmark measures time).
REWARD = "graduated"


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=["cpu", "cuda"], default="cuda")
    p.add_argument("--episodes", type=int, default=16, help="measured episodes of the trained policy")
    p.add_argument("--concurrency", type=int, default=4, help="episodes in flight at once")
    p.add_argument("--max-batch", type=int, default=1,
                   help="HFPolicy batch: concurrent episodes' replies generated together (1: one at a time)")
    p.add_argument("--train-steps", type=int, default=500, help="most behaviour-cloning steps")
    p.add_argument("--target-loss", type=float, default=0.005, help="stop training once a step's loss is below")
    p.add_argument("--lr", type=float, default=5e-3, help="peak learning rate (tiny: 1e-2)")
    p.add_argument("--batch-size", type=int, default=0, help="demonstrations per step (0: all)")
    p.add_argument("--demos-per-task", type=int, default=2, help="expert episodes per task (rounds)")
    p.add_argument("--model-size", choices=sorted(MODEL_SIZES), default="small")
    p.add_argument("--vocab-size", type=int, default=4096, help="BPE vocabulary (the corpus may stop it short)")
    p.add_argument("--max-turns", type=int, default=12)
    p.add_argument("--max-new-tokens", type=int, default=2048,
                   help="tokens one reply may generate (measured episodes: at most twice the longest demonstrated)")
    p.add_argument("--max-context", type=int, default=16384, help="episode context and model positions")
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy (the replayed demonstrations)")
    p.add_argument("--tasks", default="", help="comma-separated problem ids (level1/1,...); default: all")
    p.add_argument("--benchmark-root", default=str(SAMPLE))
    p.add_argument("--solutions", default="", help="default: examples/kernelbench_sample_solutions/<backend>")
    p.add_argument("--model-device", default="", help="default: cuda for --backend cuda, else cpu")
    p.add_argument("--sandbox-devices", default="", help="comma-separated CUDA_VISIBLE_DEVICES entries")
    p.add_argument("--cache-dir", default="", help="sandbox cache (default: $CUDA_AGENT_CACHE or ~/.cache)")
    p.add_argument("--no-compile-baseline", action="store_true", help="time eager PyTorch only")
    p.add_argument("--quick-sandbox", action="store_true",
                   help="--no-compile-baseline, and 1 warm-up and 3 timed runs (smoke tests)")
    p.add_argument("--output-dir", default=str(ROOT / "outputs" / "bench_agent_hf"),
                   help="the saved model + tokenizer, demonstrations.jsonl and trajectories.jsonl")
    p.add_argument("--out", default="", help="the JSON report (also printed)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true")
    return p.parse_args(argv)


def sandbox_config(args: argparse.Namespace) -> SandboxConfig:
    cfg = SandboxConfig(backend=args.backend, cache_dir=args.cache_dir,
                        devices=tuple(d for d in args.sandbox_devices.split(",") if d))
    if args.quick_sandbox or args.no_compile_baseline:
        cfg = replace(cfg, compile_baseline=False)
    if args.quick_sandbox:
        cfg = replace(cfg, timing=TimingConfig(warmup=1, warmup_ms=0.0, repeats=3))
    return cfg


def task_pairs(args: argparse.Namespace) -> tuple[list[tuple[Any, Path]], dict[str, str]]:
    """(problem, solution path) for every selected problem with a readable solution, and why
    the others have none (the CPU sample has a missing and an invalid one on purpose)."""
    problems = load_problems(args.benchmark_root, [1, 2, 3])
    wanted = {t.strip() for t in args.tasks.split(",") if t.strip()}
    if wanted:
        problems = [p for p in problems if p.id in wanted]
        missing = wanted - {p.id for p in problems}
        if missing:
            raise SystemExit(f"unknown --tasks {sorted(missing)} under {args.benchmark_root}")
    solutions = replay_solutions(args.solutions or SAMPLE_SOLUTIONS / args.backend, problems,
                                 Path(args.output_dir) / "replayed_solutions")
    pairs, skipped = [], {}
    for problem in problems:
        try:
            if solutions[problem.key] is None:
                raise SolutionError("no solution")
            read_solution(solutions[problem.key])
            pairs.append((problem, solutions[problem.key]))
        except SolutionError as exc:
            skipped[problem.id] = str(exc)
    if not pairs:
        raise SystemExit(f"no selected problem has a solution to demonstrate: {skipped}")
    return pairs, skipped


class ProgressWriter:
    """TrajectoryWriter that also ticks a progress bar (run_episodes calls append per episode)."""

    def __init__(self, path: Path, bar: Any):
        self.writer, self.bar = TrajectoryWriter(path), bar

    def append(self, traj: Trajectory) -> None:
        self.writer.append(traj)
        self.bar.update(1)


class TimedPolicy:
    """Wraps a policy. Serial (HFPolicy without batching): one generate at a time, timed inside
    the lock, so the model's own work is told apart from episodes queueing behind each other.
    Batched: calls go through at once (HFPolicy gathers them) and each call's seconds count as
    generation, gathering included; generation_wait is then 0."""

    def __init__(self, policy: Any, serial: bool = True):
        self.policy, self.name = policy, policy.name
        self.tokenizer, self.reports_logprobs = policy.tokenizer, policy.reports_logprobs
        self.sampling = getattr(policy, "sampling", None)
        self.busy_s, self.tokens, self.calls = 0.0, 0, 0
        self._lock = threading.Lock() if serial else contextlib.nullcontext()
        self._count = threading.Lock()

    def generate(self, messages: list[dict], prompt_ids: Optional[list[int]], max_new_tokens: int) -> Any:
        with self._lock:
            start = time.monotonic()
            gen = self.policy.generate(messages, prompt_ids, max_new_tokens)
            with self._count:
                self.busy_s += time.monotonic() - start
                self.tokens += len(gen.token_ids or [])
                self.calls += 1
        return gen


def train(tokenizer, demos: list[Trajectory], args: argparse.Namespace, device: str):
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(small_model_config(tokenizer, args.model_size, args.max_context))
    examples = [(d.ledger.token_ids, d.ledger.loss_mask) for d in demos]
    start = time.monotonic()
    losses = behaviour_clone(model, examples, tokenizer.pad_token_id, args.train_steps, args.lr, device,
                             args.target_loss, args.batch_size, progress=not args.no_progress)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return model, losses, time.monotonic() - start


def main(argv: Optional[list[str]] = None) -> dict:
    args = parse_args(argv)
    device = args.model_device or ("cuda" if args.backend == "cuda" else "cpu")
    pairs, skipped = task_pairs(args)
    cfg = AgentConfig(max_turns=args.max_turns, max_new_tokens_per_turn=args.max_new_tokens,
                      max_context_tokens=args.max_context)
    started = time.monotonic()
    report: dict[str, Any] = {"backend": args.backend, "model_device": device, "seed": args.seed,
                              "skipped_tasks": skipped}
    with make_pool(sandbox_config(args)) as pool:
        problems, longest_reply = make_policy(args, pairs, cfg, pool, device, report)
        # A model that derails rambles until the limit: no reply needs more than the experts' longest.
        cfg = replace(cfg, max_new_tokens_per_turn=min(args.max_new_tokens, 2 * longest_reply))
        report.update(measure(args, problems, cfg, pool, device))
    report["total_s"] = time.monotonic() - started
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return report


def make_policy(args: argparse.Namespace, pairs, cfg: AgentConfig, pool, device: str,
                report: dict) -> tuple[list, int]:
    """Tokenizer, demonstrations, behaviour cloning, save_pretrained to --output-dir; returns the
    problems with a correct demonstration (the ones the measured episodes run) and the longest
    demonstrated reply in tokens."""
    import torch
    from tqdm import tqdm

    corpus = chat_corpus([(p.path, s) for p, s in pairs], cfg, args.backend)
    tokenizer = build_chat_tokenizer(corpus, args.vocab_size)
    report["tokenizer"] = {"vocab_size": len(tokenizer), "corpus_chars": sum(map(len, corpus))}
    t0 = time.monotonic()
    with tqdm(total=len(pairs) * args.demos_per_task, desc="demonstrations", unit="episode",
              disable=args.no_progress) as bar:
        demos = asyncio.run(demonstrations([(p.path, s) for p, s in pairs], tokenizer, pool, cfg, args.backend,
                                           reward=REWARD, rounds=args.demos_per_task, on_episode=bar.update))
    demos = [(pairs[i][0], d) for i, d in demos]
    report["demonstrations"] = demo_summary([d for _, d in demos], time.monotonic() - t0)
    (Path(args.output_dir) / "demonstrations.jsonl").unlink(missing_ok=True)
    for _, demo in demos:  # readable with render_transcript, like any trajectory row
        TrajectoryWriter(Path(args.output_dir) / "demonstrations.jsonl").append(demo)
    kept = [(p, d) for p, d in demos if demonstrated_correctly(d)]
    if not kept:
        raise SystemExit(f"no demonstration ended correct: {report['demonstrations']}")
    report["demonstrations"]["used"] = sorted({p.id for p, _ in kept})
    model, losses, train_s = train(tokenizer, [d for _, d in kept], args, device)
    report["model"] = {"size": args.model_size, "parameters": sum(p.numel() for p in model.parameters()),
                       "path": str(save_policy(model, tokenizer, args.output_dir))}
    report["training"] = train_summary(losses, train_s, args)
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    longest = max(end - start for _, d in kept for start, end in (t.gen_span for t in d.turns))
    return list({p.id: p for p, _ in kept}.values()), longest


def measure(args: argparse.Namespace, problems: list, cfg: AgentConfig, pool, device: str) -> dict:
    """--episodes episodes of HFPolicy loaded from --output-dir, over ``problems`` cycled."""
    import torch
    from tqdm import tqdm

    hf = HFPolicy(args.output_dir, device=device, temperature=args.temperature, seed=args.seed,
                  max_batch=args.max_batch)
    policy = TimedPolicy(hf, serial=args.max_batch == 1)
    tasks = [problems[i % len(problems)] for i in range(args.episodes)]
    rows = Path(args.output_dir) / "trajectories.jsonl"
    rows.unlink(missing_ok=True)
    start = time.monotonic()
    with tqdm(total=args.episodes, desc="episodes", unit="episode", disable=args.no_progress) as bar:
        with hf:  # the batcher thread ends with the measurement
            trajs = asyncio.run(run_episodes([p.path for p in tasks], policy, pool, cfg, args.backend, reward=REWARD,
                                             writer=ProgressWriter(rows, bar), concurrency=args.concurrency,
                                             episode_ids=[f"{i:03d}-{p.id.replace('/', '-')}"
                                                          for i, p in enumerate(tasks)]))
    report = episode_report(trajs, policy, time.monotonic() - start, args)
    report["device"] = torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"
    report["max_new_tokens_per_turn"] = cfg.max_new_tokens_per_turn
    return report


# ---------------------------------------------------------------- report

def demo_summary(demos: list[Trajectory], seconds: float) -> dict:
    """The expert's episodes; wall_s includes building every solution once first."""
    return {"episodes": len(demos), "wall_s": seconds,
            "correct": sum(bool((d.final_measurement or {}).get("correct")) for d in demos),
            "stop_reasons": dict(Counter(d.stop_reason for d in demos)),
            "tokens": [len(d.ledger) for d in demos],
            "generated_tokens": [sum(d.ledger.loss_mask) for d in demos]}


def train_summary(losses: list[float], seconds: float, args: argparse.Namespace) -> dict:
    every = max(1, len(losses) // 50)
    return {"steps": len(losses), "max_steps": args.train_steps, "target_loss": args.target_loss,
            "first_loss": losses[0], "final_loss": losses[-1], "seconds": seconds,
            "loss_curve": [[i, losses[i]] for i in range(0, len(losses), every)]}


def episode_report(trajs: list[Trajectory], policy: TimedPolicy, wall: float, args: argparse.Namespace) -> dict:
    calls = Counter(c.name for t in trajs for turn in t.turns for c in turn.tool_calls)
    n = len(trajs)
    split = time_split(trajs, policy.busy_s)
    summed = sum(t.timings.get("episode_s", 0.0) for t in trajs)
    speedups = [m.get("speedup_vs_eager") for m in (t.final_measurement or {} for t in trajs)]
    return {
        "episodes": n, "concurrency": args.concurrency, "temperature": args.temperature, "wall_s": wall,
        "episodes_per_hour": 3600.0 * n / wall if wall > 0 else None,
        "turns_per_episode": sum(len(t.turns) for t in trajs) / max(n, 1),
        "generated_tokens": policy.tokens, "generation_calls": policy.calls,
        "generation_tokens_per_s": policy.tokens / policy.busy_s if policy.busy_s > 0 else None,
        "generation_batch_sizes": dict(sorted(Counter(policy.policy.batch_sizes).items())),
        "tool_calls": dict(calls), "sandbox_tool_calls": sum(calls[name] for name in SANDBOX_TOOLS),
        "sandbox_evaluations": sum(int(t.timings.get("sandbox_evaluations", 0)) for t in trajs),
        "invalid_tool_calls": sum(t.invalid_tool_calls for t in trajs),
        "outcomes": {"stop_reasons": stop_reason_shares(trajs),
                     "template_drift_share": sum(t.stop_reason == "template_drift" for t in trajs) / max(n, 1),
                     "final_correct": sum(bool((t.final_measurement or {}).get("correct")) for t in trajs),
                     "best_correct": sum(t.best_measurement is not None for t in trajs),
                     "final_errors": dict(Counter((t.final_measurement or {}).get("error") for t in trajs)),
                     "speedup_vs_eager": [s for s in speedups if s is not None]},
        "episode_seconds_total": summed,
        "time_split_s": split,
        "sandbox_stage_s": stage_totals(trajs),
        "time_split_share": {k: v / summed for k, v in split.items()} if summed > 0 else {},
        "per_episode": [episode_row(t) for t in trajs],
    }


def stop_reason_shares(trajs: list[Trajectory]) -> dict[str, dict[str, float]]:
    """Episodes per stop reason and their share of all (template_drift's should stay under 1 %)."""
    counts = Counter(t.stop_reason for t in trajs)
    return {reason: {"episodes": n, "share": n / len(trajs)} for reason, n in sorted(counts.items())}


def time_split(trajs: list[Trajectory], generation_busy_s: float) -> dict[str, float]:
    """Summed episode seconds by where they went; 'other' is what the recorded parts leave."""
    def total(key: str) -> float:
        return sum(t.timings.get(key, 0.0) for t in trajs)

    split = {"generation": generation_busy_s, "generation_wait": total("generate_s") - generation_busy_s,
             "build": total("sandbox_build_s"),
             "verify": total("sandbox_reference_s") + total("sandbox_verify_s"),
             "timing": total("sandbox_baselines_s") + total("sandbox_timing_s")}
    split["sandbox_overhead"] = total("sandbox_s") - split["build"] - split["verify"] - split["timing"]
    split["other"] = total("episode_s") - sum(split.values())
    return split


def stage_totals(trajs: list[Trajectory]) -> dict[str, float]:
    """Every sandbox stage on its own (reference, baselines, ...), summed over the episodes."""
    totals: Counter = Counter()
    for t in trajs:
        totals.update({k[len("sandbox_"):-len("_s")]: v for k, v in t.timings.items()
                       if k.startswith("sandbox_") and k.endswith("_s") and k != "sandbox_s"})
    return dict(totals)


def episode_row(t: Trajectory) -> dict:
    m = t.final_measurement or {}
    return {"episode_id": t.episode_id, "task": t.task, "stop_reason": t.stop_reason, "stop_detail": t.stop_detail,
            "turns": len(t.turns), "tokens": len(t.ledger), "generated_tokens": sum(t.ledger.loss_mask),
            "tool_calls": [c.name for turn in t.turns for c in turn.tool_calls],
            "invalid_tool_calls": t.invalid_tool_calls, "final_correct": bool(m.get("correct")),
            "final_error": m.get("error"), "reward": t.reward, "speedup_vs_eager": m.get("speedup_vs_eager"),
            "speedup_vs_compile": m.get("speedup_vs_compile"), "timings": dict(t.timings)}


if __name__ == "__main__":
    main()
