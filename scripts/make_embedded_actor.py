"""Build the embedded default actor (data/models/tiny_actor/): a tiny Llama behaviour-cloned on
scripted expert episodes of this repository's correct example solutions, run through the real
sandbox, then reloaded by path with HFPolicy and measured on greedy episodes.

Launch lines (from the repository root):
    # CPU (the committed build; README.md in the output says how long it took):
    python scripts/make_embedded_actor.py --backends cpu --out data/models/tiny_actor
    # A GPU host: CPU and CUDA demonstrations in one model (the CUDA ones need the GPU sandbox;
    # the model conditions on SKILL.md's backend paragraph and the task):
    python scripts/make_embedded_actor.py --backends cpu,cuda --device cuda --out data/models/tiny_actor

What it does:
  1. (task, solution) pairs per backend: the sample benchmark (examples/kernelbench_sample) with
     examples/kernelbench_sample_solutions/<backend>, and examples/tasks with the workspaces of
     examples/solutions/<backend>. The sandbox decides which are correct: a demonstration is
     kept only when its final verdict is (the CPU sample set holds wrong ones and hacks on purpose).
  2. a byte-level BPE tokenizer (--vocab-size) trained on what the episodes say and on the task
     prompts of --corpus-tasks (the training set the actor will meet: data/ops_h200), with the
     offline chat template (src/agent/offline_model.py);
  3. --demos-per-task expert episodes per pair (write each file, compile, verify, profile,
     finish) through the sandbox pool: the training examples are their token ledgers;
  4. a fresh Llama of size "actor" (hidden 128, 2 layers, 4 heads; tied embeddings) trained with
     behaviour_clone on the generated tokens only, saved with save_pretrained in --dtype;
  5. HFPolicy loads --out by path (as policy.model_name_or_path=PATH does) and runs
     --eval-rounds greedy episodes per kept task through the pool; the counts go to the README.
Writes into --out: the model (safetensors), tokenizer files with the chat template, build.json
(everything measured) and README.md; the demonstrations and the measured trajectories go to
--work-dir.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sandbox import SandboxConfig  # noqa: E402
from sandbox.errors import SolutionError  # noqa: E402
from sandbox.pool import make_pool  # noqa: E402
from sandbox.solution import read_solution  # noqa: E402
from src.agent import AgentConfig, HFPolicy, TrajectoryWriter, run_episodes  # noqa: E402
from src.agent.episode import task_prompt  # noqa: E402
from src.agent.offline_model import (behaviour_clone, build_chat_tokenizer, chat_corpus,  # noqa: E402
                                     demonstrated_correctly, demonstrations, save_policy, small_model_config)
from src.evaluation.kernelbench import load_problems  # noqa: E402
from src.evaluation.replay import replay_solutions  # noqa: E402

EXAMPLES = ROOT / "examples"
# examples/tasks/<task>.py -> its workspace solution under examples/solutions/<backend>/.
EXAMPLE_WORKSPACES = {"cpu": {"relu_add": "relu_add_workspace", "linear_relu": "linear_relu_workspace"},
                      "cuda": {"relu_add": "relu_add_workspace", "linear_relu": "linear_relu_cublas"}}
# The reward the demonstrations' verdicts are scored with (only their correctness matters here).
REWARD = "graduated"


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backends", default="cpu", help="comma-separated: cpu, cuda (cuda needs a GPU)")
    p.add_argument("--out", default=str(ROOT / "data" / "models" / "tiny_actor"))
    p.add_argument("--work-dir", default=str(ROOT / "outputs" / "make_embedded_actor"),
                   help="demonstrations.jsonl, trajectories.jsonl, the replayed solutions")
    p.add_argument("--vocab-size", type=int, default=4096)
    p.add_argument("--corpus-tasks", default=str(ROOT / "data" / "ops_h200" / "tasks.parquet"),
                   help="a task parquet whose prompts join the tokenizer's corpus ('' for none)")
    p.add_argument("--demos-per-task", type=int, default=2)
    p.add_argument("--steps", type=int, default=400, help="most behaviour-cloning steps")
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--batch-size", type=int, default=2,
                   help="demonstrations per step (0: all); their shared system prompt runs once a step")
    p.add_argument("--target-loss", type=float, default=0.005, help="stop once a step's loss is below")
    p.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16", help="saved weights")
    p.add_argument("--device", default="cpu", help="where training runs")
    p.add_argument("--eval-rounds", type=int, default=2, help="greedy episodes per kept task")
    p.add_argument("--eval-max-turns", type=int, default=16)
    # The demonstrations are a few thousand tokens; positions far past them promise a context the
    # actor never saw, and train.py sizes every episode's context (and so its cost) by them.
    p.add_argument("--max-positions", type=int, default=8192,
                   help="the actor's max_position_embeddings: train.py caps agent.max_context_tokens at it")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache-dir", default="", help="sandbox cache (default: $CUDA_AGENT_CACHE or ~/.cache)")
    p.add_argument("--no-progress", action="store_true")
    return p.parse_args(argv)


def task_pairs(backend: str, work_dir: Path) -> tuple[list[tuple[Path, Path]], dict[str, str]]:
    """Every (task, solution) pair of the examples for one backend whose solution reads as one
    (correctness is the sandbox's call), and why the others were left out."""
    problems = load_problems(EXAMPLES / "kernelbench_sample", [1, 2, 3])
    solutions = replay_solutions(EXAMPLES / "kernelbench_sample_solutions" / backend, problems,
                                 work_dir / f"replayed-{backend}")
    candidates = [(p.path, solutions[p.key]) for p in problems]
    candidates += [(EXAMPLES / "tasks" / f"{task}.py", EXAMPLES / "solutions" / backend / workspace)
                   for task, workspace in EXAMPLE_WORKSPACES[backend].items()]
    pairs, skipped = [], {}
    for task, solution in candidates:
        try:
            if solution is None:
                raise SolutionError("no solution")
            read_solution(solution)
            pairs.append((task, solution))
        except SolutionError as exc:
            skipped[task.relative_to(ROOT).as_posix()] = str(exc)
    return pairs, skipped


def sandbox_config(backend: str, cache_dir: str) -> SandboxConfig:
    return SandboxConfig(backend=backend, cache_dir=cache_dir)


def record(args: argparse.Namespace, backends: list[str], cfg: AgentConfig, work_dir: Path):
    """The tokenizer and the kept demonstrations [(backend, task path, trajectory)] of every backend."""
    found = {b: task_pairs(b, work_dir) for b in backends}
    pairs = {b: found[b][0] for b in backends}
    corpus = [text for b in backends for text in chat_corpus(pairs[b], cfg, b)]
    if args.corpus_tasks:
        from data_gen.dataset import load_tasks

        corpus += [task_prompt(row["code"], cfg) for row in load_tasks(args.corpus_tasks)]
    tokenizer = build_chat_tokenizer(corpus, args.vocab_size)
    kept, summary = [], {}
    writer = TrajectoryWriter(work_dir / "demonstrations.jsonl")
    for b in backends:
        with make_pool(sandbox_config(b, args.cache_dir)) as pool:
            demos = asyncio.run(demonstrations(pairs[b], tokenizer, pool, cfg, b, reward=REWARD,
                                               rounds=args.demos_per_task))
        for i, traj in demos:
            writer.append(traj)
            if demonstrated_correctly(traj):
                kept.append((b, pairs[b][i][0], traj))
        summary[b] = {"pairs": len(pairs[b]), "episodes": len(demos), "unreadable": found[b][1],
                      "correct": sorted({str(pairs[b][i][0].relative_to(ROOT)) for i, t in demos
                                         if demonstrated_correctly(t)}),
                      "not_correct": sorted({f"{pairs[b][i][0].relative_to(ROOT)}: {(t.final_measurement or {}).get('error')}"
                                             for i, t in demos if not demonstrated_correctly(t)})}
    return tokenizer, kept, summary


def train(args: argparse.Namespace, tokenizer: Any, kept: list) -> tuple[Any, dict]:
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(small_model_config(tokenizer, "actor", args.max_positions))
    examples = [(t.ledger.token_ids, t.ledger.loss_mask) for _, _, t in kept]
    start = time.monotonic()
    losses = behaviour_clone(model, examples, tokenizer.pad_token_id, args.steps, args.lr, args.device,
                             args.target_loss, args.batch_size, progress=not args.no_progress)
    every = max(1, len(losses) // 20)
    return model.cpu(), {"steps": len(losses), "max_steps": args.steps, "lr": args.lr, "batch_size": args.batch_size,
                         "target_loss": args.target_loss, "max_positions": args.max_positions, "first_loss": losses[0], "final_loss": losses[-1],
                         "seconds": round(time.monotonic() - start, 1), "device": args.device,
                         "loss_curve": [[i, round(losses[i], 5)] for i in range(0, len(losses), every)],
                         "demonstrations": len(examples), "tokens": [len(e[0]) for e in examples],
                         "generated_tokens": [sum(e[1]) for e in examples]}


def measure(args: argparse.Namespace, kept: list, work_dir: Path) -> dict:
    """Greedy episodes of the saved model, loaded by path, over each kept task --eval-rounds times."""
    out: dict[str, Any] = {}
    longest = max(e - s for _, _, t in kept for s, e in (turn.gen_span for turn in t.turns))
    cfg = AgentConfig(max_turns=args.eval_max_turns, max_new_tokens_per_turn=2 * longest)
    for backend in sorted({b for b, _, _ in kept}):
        tasks = sorted({str(task) for b, task, _ in kept if b == backend}) * args.eval_rounds
        policy = HFPolicy(args.out, device="cpu" if backend == "cpu" else "cuda", temperature=0.0)
        start = time.monotonic()
        with make_pool(sandbox_config(backend, args.cache_dir)) as pool:
            trajs = asyncio.run(run_episodes(tasks, policy, pool, cfg, backend, reward=REWARD, concurrency=1,
                                             writer=TrajectoryWriter(work_dir / f"trajectories-{backend}.jsonl")))
        correct = [bool((t.final_measurement or {}).get("correct")) for t in trajs]
        out[backend] = {"episodes": len(trajs), "final_correct": sum(correct), "wall_s": round(time.monotonic() - start),
                        "stop_reasons": dict(Counter(t.stop_reason for t in trajs)),
                        "rewards": [t.reward for t in trajs], "max_turns": cfg.max_turns,
                        "max_new_tokens_per_turn": cfg.max_new_tokens_per_turn,
                        "per_task": {Path(task).relative_to(ROOT).as_posix(): [c for tk, c in zip(tasks, correct)
                                                                               if tk == task] for task in set(tasks)}}
    return out


def save(model: Any, tokenizer: Any, args: argparse.Namespace) -> dict:
    import torch

    out = Path(args.out)
    for stale in out.glob("*"):  # a rebuild leaves nothing of the previous one
        if stale.is_file():
            stale.unlink()
    save_policy(model.to(getattr(torch, args.dtype)), tokenizer, out)
    return {"parameters": sum(p.numel() for p in model.parameters()), "dtype": args.dtype,
            "files": {p.name: p.stat().st_size for p in sorted(out.iterdir()) if p.is_file()}}


def main(argv: Optional[list[str]] = None) -> dict:
    args = parse_args(argv)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    work_dir = Path(args.work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    for name in ("demonstrations.jsonl", *(f"trajectories-{b}.jsonl" for b in backends)):
        (work_dir / name).unlink(missing_ok=True)
    cfg = AgentConfig()
    started = time.monotonic()
    tokenizer, kept, demos = record(args, backends, cfg, work_dir)
    if not kept:
        raise SystemExit(f"no demonstration ended correct: {demos}")
    model, training = train(args, tokenizer, kept)
    build = {"command": "python scripts/make_embedded_actor.py " + " ".join(argv if argv is not None else sys.argv[1:]),
             "commit": git_commit(), "backends": backends, "seed": args.seed, "vocab_size": len(tokenizer),
             "corpus_tasks": shown(args.corpus_tasks),
             "demonstrations": demos, "training": training, "model": save(model, tokenizer, args)}
    build["greedy_episodes"] = measure(args, kept, work_dir)
    build["total_s"] = round(time.monotonic() - started)
    Path(args.out, "build.json").write_text(json.dumps(build, indent=1) + "\n")
    Path(args.out, "README.md").write_text(readme(build))
    print(json.dumps({k: v for k, v in build.items() if k != "training"}, indent=1))
    return build


def shown(path: str) -> str:
    """A path as the README shows it: relative to the repository when it is inside."""
    resolved = Path(path).resolve() if path else None
    return "" if resolved is None else (resolved.relative_to(ROOT).as_posix() if resolved.is_relative_to(ROOT)
                                         else str(resolved))


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def readme(build: dict) -> str:
    t, m = build["training"], build["model"]
    size = sum(m["files"].values())
    lines = ["# tiny_actor: the embedded default actor", "",
             "A tiny Llama behaviour-cloned on scripted expert episodes (write the known solution's files, "
             "compile, verify, profile, finish) that ran through the real sandbox, so that a run with no "
             "pretrained weights at hand has a policy that can act: it writes real tool calls and solves "
             "the tasks it was shown. It is not a capable model: on other tasks it replays what it "
             "learned and fails. Loads like any Hugging Face model: `HFPolicy(\"data/models/tiny_actor\")` "
             "or `policy.model_name_or_path=data/models/tiny_actor`.", "",
             f"- Made by: `{build['command']}` at commit {build['commit']} (scripts/make_embedded_actor.py "
             "says what each step does; build.json holds every number below and the loss curve).",
             f"- Cloned on ({', '.join(build['backends'])} backend): "
             + "; ".join(f"{b}: " + ", ".join(f"`{c}`" for c in d["correct"]) for b, d in build["demonstrations"].items())
             + f"; {t['demonstrations']} demonstrations ({t['tokens'][0]}-{max(t['tokens'])} tokens each, "
             f"{min(t['generated_tokens'])}-{max(t['generated_tokens'])} of them generated).",
             "- Not cloned (their example solutions are not correct, on purpose): "
             + "; ".join(", ".join([f"`{c}`" for c in d["not_correct"]]
                                   + [f"`{task}: {why}`" for task, why in d["unreadable"].items()])
                         for d in build["demonstrations"].values()) + ".",
             f"- Model: Llama, hidden 128, 2 layers, 4 heads, tied embeddings, vocabulary {build['vocab_size']} "
             f"(byte-level BPE with the offline chat template, trained on the episodes' text and the task "
             f"prompts of `{build['corpus_tasks']}`); {m['parameters']:,} parameters, {m['dtype']}.",
             f"- Training: {t['steps']} steps of AdamW (lr {t['lr']}, {t['batch_size']} demonstrations a step, "
             f"loss on the generated tokens only) on {t['device']}, {t['seconds']:.0f} s; loss "
             f"{t['first_loss']:.3f} -> {t['final_loss']:.4f}.",
             f"- Size: {size / 1e6:.2f} MB in all: " + ", ".join(f"{n} {s / 1e3:.0f} kB" for n, s in m["files"].items()) + "."]
    for backend, g in build["greedy_episodes"].items():
        lines.append(f"- Greedy episodes ({backend}, reloaded by path with HFPolicy, temperature 0, "
                     f"{g['max_turns']} turns at most): {g['final_correct']} of {g['episodes']} reach a correct "
                     f"final verdict; stop reasons {g['stop_reasons']}; per task " + ", ".join(
                         f"`{task}` {sum(c)}/{len(c)}" for task, c in sorted(g["per_task"].items())) + ".")
    lines += ["", "Sampling is our own loop (src/agent/sampling.py): generation_config.json is saved "
              "by save_pretrained but never read.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
