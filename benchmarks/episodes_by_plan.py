"""The family's episodes by the plan their first reply opens with, from rollouts files: what each
plan earns in sampled (training) or greedy (held-out) episodes, per step, and, for two judgements of
the same held-out tasks, what changed per task.

Every teacher demonstration's first reply opens with one sentence naming its plan
(``Script.thought``: one kernel per op ``naive``, the chain fused in registers ``fused``, or fused
with SIMD loops / float4 loads ``vectorised``); a first reply that opens with none of the three is
``other``. benchmarks/bench_plan_choice.py reads the same decision from the actor's probabilities;
this reads it from the episodes, with their rewards.

A rollouts file holds what a stage wrote as episodes finished, resumed runs included: a held-out
episode judged twice (a validation stopped and run again) counts once, its last judgement; a
training step sampled again after a resume keeps its last ``--per-step`` episodes (the completed
attempt: the stopped one's episodes come first), and a step with fewer is left out as partial.

    # CPU, any machine (reads jsonl only; seconds):
    python benchmarks/episodes_by_plan.py --tasks data/family/cpu/tasks.parquet \\
        RUNS/graduated/seed0/agentic_full/rollouts/train.jsonl
    # per task, two greedy judgements of the 38 held-out tasks (before and after PPO):
    python benchmarks/episodes_by_plan.py --tasks data/family/cpu/tasks.parquet \\
        --compare BEFORE/rollouts/val.jsonl AFTER/rollouts/val.jsonl
    # stages trained on other rewards (binary, continuous), on one scale: --score graduated

``--score REWARD`` reads every episode's reward again, by REWARD (sandbox.reward.REWARDS), from the
measurement its own reward was taken from (``reward_source``: final or best; none: -1, as the
stage's metrics count it), so that episodes judged under different rewards compare.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Iterable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_plan_choice import PLANS, openings, task_specs  # noqa: E402
from sandbox.reward import reward_fn  # noqa: E402
from src.data.rollout import reward_under  # noqa: E402
from src.evaluation.metrics import row_passed  # noqa: E402

OTHER = "other"


def read_rows(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    usable = [r for r in rows if r.get("episode_id") and r.get("task") and "reward" in r]
    if not usable:
        raise SystemExit(f"{path}: no episode rows (episode_id, task, reward)")
    return usable


def rescored(rows: Sequence[dict], reward: str) -> list[dict]:
    """The rows with ``reward`` by the named reward of the measurement it was taken from."""
    return [{**r, "reward": reward_under(r, reward)} for r in rows]


def task_name(row: dict) -> str:
    return Path(row["task"]).stem


def step_of(row: dict) -> int:
    """The step an episode was sampled or judged at: ``train_step``, else the ``sNNNNNN`` field of
    its id (a validation's episodes carry the step they judged)."""
    if row.get("train_step") is not None:
        return int(row["train_step"])
    field = row["episode_id"].split("-")[1]
    if not field.startswith("s") or not field[1:].isdigit():
        raise SystemExit(f"{row['episode_id']}: no train_step and no step in the episode id")
    return int(field[1:])


def first_reply(row: dict) -> str:
    return next((m.get("content") or "" for m in row.get("messages", []) if m.get("role") == "assistant"), "")


def opening_plan(row: dict, texts: dict[str, str]) -> str:
    """The plan whose opening sentence the first reply starts with (``texts``: the task's
    openings, bench_plan_choice.openings), else ``other``."""
    reply = first_reply(row)
    return next((plan for plan in PLANS if reply.startswith(texts[plan].rstrip("\n"))), OTHER)


def latest(rows: Sequence[dict], per_step: int | None) -> tuple[list[dict], list[int]]:
    """One row per episode id (its last), then per training step (ids ``train-...``) the last
    ``per_step`` rows; training steps with fewer are returned as partial and left out. A
    validation's episodes (their ids name each task, so a second judgement replaces the first)
    and every step when ``per_step`` is None are kept whole."""
    last: dict[str, dict] = {}
    for row in rows:
        last.pop(row["episode_id"], None)
        last[row["episode_id"]] = row
    by_step: dict[int, list[dict]] = defaultdict(list)
    for row in last.values():
        by_step[step_of(row)].append(row)
    kept, partial = [], []
    for step in sorted(by_step):
        group = by_step[step]
        sampled = per_step is not None and group[0]["episode_id"].startswith("train-")
        if sampled and len(group) < per_step:
            partial.append(step)
            continue
        kept.extend(group[-per_step:] if sampled else group)
    return kept, partial


def correct(row: dict) -> bool:
    """Passed as the reward reads it (correct, no violation, no error): the evaluation's rule."""
    return bool(row.get("final_measurement")) and row_passed(row["final_measurement"])


def plan_stats(rows: Iterable[dict]) -> dict:
    rows = list(rows)
    rewards = [float(r["reward"]) for r in rows]
    right = [float(r["reward"]) for r in rows if correct(r)]
    return {"episodes": len(rows), "pass": sum(map(correct, rows)) / len(rows),
            "reward_mean": sum(rewards) / len(rows),
            "reward_when_correct": sum(right) / len(right) if right else None,
            "threes": sum(1 for x in rewards if x >= 3)}


def summarise(rows: Sequence[dict], plans: dict[int, str]) -> dict:
    """Per step, each plan's episode count; over all steps, each plan's stats."""
    by_step: dict[int, Counter] = defaultdict(Counter)
    by_plan: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_step[step_of(row)][plans[id(row)]] += 1
        by_plan[plans[id(row)]].append(row)
    return {"per_step": {step: dict(counts) for step, counts in sorted(by_step.items())},
            "by_plan": {plan: plan_stats(found) for plan, found in sorted(by_plan.items())}}


def compare(before: Sequence[dict], after: Sequence[dict], plans: dict[int, str]) -> dict:
    """Two judgements of the same tasks (one episode each, the last per task): how many rewards
    rose and fell, each transition's count, and each side's openings."""
    b = {task_name(r): r for r in before}
    a = {task_name(r): r for r in after}
    shared = sorted(set(b) & set(a))
    if not shared:
        raise SystemExit("--compare: the two files share no task")
    moves = Counter(f"{b[t]['reward']:g} -> {a[t]['reward']:g}" for t in shared if a[t]["reward"] != b[t]["reward"])
    return {"tasks": len(shared),
            "up": sum(a[t]["reward"] > b[t]["reward"] for t in shared),
            "down": sum(a[t]["reward"] < b[t]["reward"] for t in shared),
            "moves": dict(moves.most_common()),
            "reward_mean": [sum(b[t]["reward"] for t in shared) / len(shared),
                            sum(a[t]["reward"] for t in shared) / len(shared)],
            "openings": [dict(Counter(plans[id(b[t])] for t in shared)),
                         dict(Counter(plans[id(a[t])] for t in shared))]}


def at_step(rows: Sequence[dict], step: int | None, path: Path) -> list[dict]:
    """The episodes of one step (``None``: the file's last step)."""
    steps = sorted({step_of(r) for r in rows})
    chosen = steps[-1] if step is None else step
    if chosen not in steps:
        raise SystemExit(f"{path}: no episodes of step {chosen} (steps {steps})")
    return [r for r in rows if step_of(r) == chosen]


def classify(rows: Sequence[dict], tasks: Path, backend: str) -> dict[int, str]:
    specs = task_specs(tasks, sorted({task_name(r) for r in rows}))
    texts = {name: openings(spec, backend) for name, spec in specs.items()}
    return {id(r): opening_plan(r, texts[task_name(r)]) for r in rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rollouts", type=Path, nargs="*", help="rollouts jsonl files, each summarised")
    parser.add_argument("--compare", type=Path, nargs=2, metavar=("BEFORE", "AFTER"),
                        help="two judgements of the same tasks, compared per task")
    parser.add_argument("--compare-steps", type=int, nargs=2, metavar=("STEP_BEFORE", "STEP_AFTER"),
                        help="the step of each --compare file's episodes (default: each file's last step)")
    parser.add_argument("--tasks", type=Path, required=True, help="the family tasks parquet (their specs)")
    parser.add_argument("--backend", choices=("cpu", "cuda"), default="cpu", help="whose openings (the teacher's)")
    parser.add_argument("--per-step", type=int, default=16,
                        help="episodes a training step samples (its last ones kept after a resume); "
                             "0 keeps every step whole")
    parser.add_argument("--score", metavar="REWARD",
                        help="read every episode's reward again by this reward (graduated, binary, continuous)")
    parser.add_argument("--out", type=Path, help="write the results here as JSON")
    args = parser.parse_args(argv)
    if args.score:
        try:
            reward_fn(args.score)
        except ValueError as e:
            parser.error(str(e))
    if not args.rollouts and not args.compare:
        parser.error("give rollouts files, --compare BEFORE AFTER, or both")
    for path in [*args.rollouts, *(args.compare or []), args.tasks]:
        if not path.is_file():
            parser.error(f"{path}: no such file")
    results: dict = {"files": {}}

    def episodes(path: Path) -> list[dict]:
        rows = read_rows(path)
        return rescored(rows, args.score) if args.score else rows

    for path in args.rollouts:
        rows = episodes(path)
        kept, partial = latest(rows, args.per_step or None)
        found = {"rows": len(rows), "kept": len(kept), "partial_steps": partial,
                 **summarise(kept, classify(kept, args.tasks, args.backend))}
        results["files"][str(path)] = found
        print(json.dumps({"file": str(path), **found}), flush=True)
    if args.compare:
        before, after = (at_step(latest(episodes(p), None)[0], step, p)
                         for p, step in zip(args.compare, args.compare_steps or (None, None)))
        results["compare"] = compare(before, after, classify([*before, *after], args.tasks, args.backend))
        print(json.dumps({"compare": [str(p) for p in args.compare], **results["compare"]}), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
