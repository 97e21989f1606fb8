"""Which plan a stage's actor opens its episodes with, and how far sampling takes it off its own
greedy path: the two things that decide the family's held-out reward, read from the model's
probabilities rather than from sampled episodes (whose rewards vary by ~1.5 an episode).

Every teacher demonstration's first reply opens with one sentence naming the plan (src/agent/
teacher.py, ``Script.thought``): one kernel per op (``naive``), one fused kernel with the chain in
registers (``fused``), or a fused kernel with SIMD loops / float4 loads (``vectorised``: on the CPU
the one that beats torch.compile). For every task of a rollouts file this scores each opening under
the actor, after that task's real prompt (the tokens before the file's first policy token), at
each temperature T: ``P_T(plan)``, normalised over the three, and the three openings' total mass at
T (how much of the actor's first sentence they cover). Along every episode of the file (e.g. the
greedy held-out episodes of a PPO stage), ``deviations_T`` is the expected number of policy tokens
at which a sample at T leaves the most likely token: sum over policy tokens of 1 - p_T(argmax). A
PPO stage that learns the plan moves ``P(vectorised)``; one that teaches the sampled policy to stay
on its path lowers ``deviations_1``; the greedy held-out reward sees neither until an argmax flips.

    # CPU, any machine (forward passes of the actor only; ~1 minute a stage for 38 tasks):
    python benchmarks/bench_plan_choice.py --stage RUNS/graduated/seed1/value \
        --stage RUNS/graduated/seed1/agentic_full --prompts RUNS/graduated/seed1/agentic_full/rollouts/val.jsonl \
        --tasks data/family/cpu/tasks.parquet --temperatures 1,0.5 --out plan_choice.json

Printed and written to --out: per stage and temperature, the mean of P_T(plan) over tasks, the
number of tasks whose most likely opening is each plan, the openings' mass, and the mean of
deviations_T over episodes (with --episodes N, the file's first N episodes; 0 skips it).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

import pyarrow.parquet as pq
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_critic_fit import Parts, stage_architecture  # noqa: E402
from data_gen.family import ChainSpec  # noqa: E402
from src.agent.teacher import Script  # noqa: E402
from src.models.actor import Actor  # noqa: E402
from src.stages.common import load_init  # noqa: E402

PLANS = ("naive", "fused", "vectorised")


def load_stage_actor(stage: Path, config: Path | None = None) -> Actor:
    """The stage's actor: the architecture of its exported config (or of ``config``, for a stage
    stopped before it exported one), every weight from its checkpoint."""
    actor = stage_architecture(config or stage / "actor")
    load_init(Parts(actor, None), stage, need=("actor",), fresh=("critic",))  # no critic needed
    return actor.eval()


def read_episodes(path: Path) -> list[dict]:
    """Rows with token ids, policy tokens and a task name (a rollouts file's episodes)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    usable = [r for r in rows if r.get("token_ids") and 1 in r.get("loss_mask", []) and r.get("task")]
    if not usable:
        raise SystemExit(f"{path}: no episode rows with token ids, policy tokens and a task")
    return usable


def task_prompts(rows: Sequence[dict]) -> dict[str, list[int]]:
    """Each task's prompt: the tokens of its first episode before the first policy token."""
    prompts: dict[str, list[int]] = {}
    for row in rows:
        task = Path(row["task"]).stem
        prompts.setdefault(task, row["token_ids"][:row["loss_mask"].index(1)])
    return prompts


def task_specs(tasks: Path, names: Sequence[str]) -> dict[str, ChainSpec]:
    table = pq.read_table(tasks, columns=["id", "spec"]).to_pylist()
    specs = {row["id"]: row["spec"] for row in table}
    missing = sorted(set(names) - set(specs))
    if missing:
        raise SystemExit(f"{tasks}: no spec for {len(missing)} task(s) of the prompts, e.g. {missing[:3]}")
    return {name: ChainSpec.from_json(specs[name]) for name in names}


def openings(spec: ChainSpec, backend: str) -> dict[str, str]:
    """The first sentence of a first reply under each plan, as the teacher writes it, with the
    newline that ends it (the next token is the tool call)."""
    script = Script(spec, backend)
    return {plan: script.thought(plan, None) + "\n" for plan in PLANS}


@torch.no_grad()
def opening_scores(model: nn.Module, prompt: list[int], continuations: Sequence[list[int]],
                   temperatures: Sequence[float]) -> torch.Tensor:
    """[len(temperatures), len(continuations)]: the summed log-prob at each temperature of each
    continuation after ``prompt``."""
    scores = torch.empty(len(temperatures), len(continuations))
    for j, tokens in enumerate(continuations):
        ids = torch.tensor([prompt + tokens])
        logits = model(input_ids=ids, use_cache=False).logits[0, len(prompt) - 1:-1].float()
        target = torch.tensor(tokens)
        for i, t in enumerate(temperatures):
            scores[i, j] = torch.log_softmax(logits / t, dim=-1).gather(1, target[:, None]).sum()
    return scores


@torch.no_grad()
def expected_deviations(model: nn.Module, row: dict, temperatures: Sequence[float]) -> list[float]:
    """Per temperature: sum over the row's policy tokens of 1 - p_T(most likely token)."""
    ids = torch.tensor([row["token_ids"]])
    logits = model(input_ids=ids, use_cache=False).logits[0, :-1].float()
    policy = torch.tensor(row["loss_mask"][1:], dtype=torch.bool)
    logits = logits[policy]
    return [float((1 - torch.softmax(logits / t, dim=-1).max(dim=-1).values).sum()) for t in temperatures]


def measure(actor: Actor, rows: list[dict], specs: dict[str, ChainSpec], backend: str,
            temperatures: Sequence[float], episodes: int) -> dict:
    tok, model = actor.tokenizer, actor.model
    per_task = {}
    for task, prompt in task_prompts(rows).items():
        texts = openings(specs[task], backend)
        scores = opening_scores(model, prompt, [tok.encode(texts[p], add_special_tokens=False) for p in PLANS],
                                temperatures)
        per_task[task] = scores
    out: dict = {"tasks": len(per_task), "by_temperature": {}}
    stacked = torch.stack(list(per_task.values()))  # [tasks, temperatures, plans]
    for i, t in enumerate(temperatures):
        probs = torch.softmax(stacked[:, i], dim=-1)
        top = probs.argmax(dim=-1)
        out["by_temperature"][str(t)] = {
            "p_plan": {p: float(probs[:, k].mean()) for k, p in enumerate(PLANS)},
            "top_plan_tasks": {p: int((top == k).sum()) for k, p in enumerate(PLANS)},
            "openings_mass": float(stacked[:, i].exp().sum(dim=-1).mean()),
        }
    if episodes:
        devs = torch.tensor([expected_deviations(model, row, temperatures) for row in rows[:episodes]])
        tokens = sum(row["loss_mask"][1:].count(1) for row in rows[:episodes])
        out["episodes"], out["policy_tokens_mean"] = len(devs), tokens / len(devs)
        for i, t in enumerate(temperatures):
            out["by_temperature"][str(t)]["deviations_mean"] = float(devs[:, i].mean())
    out["per_task"] = {task: {str(t): dict(zip(PLANS, torch.softmax(s[i], -1).tolist()))
                              for i, t in enumerate(temperatures)} for task, s in per_task.items()}
    return out


def plot(results: dict, path: Path) -> None:
    """One panel per temperature: each stage's mean P(plan) over the tasks, stacked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    temps = [str(t) for t in results["temperatures"]]
    labels = [Path(stage).parent.name + "/" + Path(stage).name for stage in results["stages"]]
    fig, axes = plt.subplots(1, len(temps), figsize=(3 + 2.2 * len(labels) * len(temps) / 2, 3.6), squeeze=False)
    for ax, t in zip(axes[0], temps):
        bottom = [0.0] * len(labels)
        for plan, colour in zip(PLANS, ("tab:red", "tab:orange", "tab:green")):
            heights = [found["by_temperature"][t]["p_plan"][plan] for found in results["stages"].values()]
            ax.bar(labels, heights, bottom=bottom, color=colour, label=plan)
            bottom = [b + h for b, h in zip(bottom, heights)]
        ax.set_title(f"T = {t}")
        ax.set_ylim(0, 1)
        ax.set_ylabel("mean P(plan) over tasks")
        ax.tick_params(axis="x", rotation=30)
    axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1, 1))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_temperatures(text: str) -> list[float]:
    values = [float(x) for x in text.split(",") if x.strip()]
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected positive temperatures, e.g. 1,0.5")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", type=Path, action="append", required=True,
                        help="a stage directory with actor/config.json and checkpoints/ (repeat)")
    parser.add_argument("--config", type=Path,
                        help="an actor directory whose config.json and tokenizer every stage's checkpoint fits "
                             "(default: each stage's actor/; a stage stopped midway has none yet)")
    parser.add_argument("--prompts", type=Path, required=True, help="a rollouts jsonl of the tasks to score")
    parser.add_argument("--tasks", type=Path, required=True, help="the family tasks parquet (their specs)")
    parser.add_argument("--backend", choices=("cpu", "cuda"), default="cpu", help="whose openings (the teacher's)")
    parser.add_argument("--temperatures", type=parse_temperatures, default=[1.0], help="comma-separated, > 0")
    parser.add_argument("--episodes", type=int, default=38, help="episodes scored for deviations (0: none)")
    parser.add_argument("--out", type=Path, help="write the results here as JSON")
    parser.add_argument("--plot", type=Path, help="write a PNG of each stage's P(plan) per temperature here")
    args = parser.parse_args(argv)
    for path in [*args.stage, args.prompts, args.tasks, *([args.config] if args.config else [])]:
        if not path.exists():
            parser.error(f"{path}: no such file or directory")
    for actor_dir in [args.config] if args.config else [stage / "actor" for stage in args.stage]:
        if not (actor_dir / "config.json").is_file():
            parser.error(f"{actor_dir}: no config.json (the stage's exported actor: its architecture; "
                         "--config DIR gives it for a stage stopped midway)")
    rows = read_episodes(args.prompts)
    specs = task_specs(args.tasks, list(task_prompts(rows)))
    results = {"prompts": str(args.prompts), "temperatures": args.temperatures, "stages": {}}
    for stage in args.stage:
        actor = load_stage_actor(stage, args.config)
        found = measure(actor, rows, specs, args.backend, args.temperatures, args.episodes)
        results["stages"][str(stage)] = found
        print(json.dumps({"stage": str(stage), **{k: v for k, v in found.items() if k != "per_task"}}), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    if args.plot:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
