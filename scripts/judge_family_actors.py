"""Judge PPO actors again on the family's held-out tasks, side by side in one run, with the
validation settings of scripts/family_pipeline.py: arms whose held-out points were judged in
different device calls are judged again under one host's load at one time.

Why: the family's sandbox times the kernels on the host's CPU, and a judgement's speed tiers move
with the host and its load. The same 38 final solutions judged in two calls (2026-12-07) read
0.13-0.21 apart in held-out reward. That is as large as some gaps between arms judged in
different calls (docs/family.md, "Judged twice: the same solutions in two calls").

Two steps. `pack` runs where the carries are: each stage's actor is taken from a carry's weights
(a folder with weights.json and parts, or git:REV:PATH), float16, without the critic (a judge
builds a fresh one), 9 MB each, into a folder that a device call carries. `judge` runs every
packed actor at once on the host, one train.py run each (stage.module.judge_only: the start
validation, then stop). It prints one JSON line per actor, then one comparing them on the tasks
every judge finished (a budget may stop them at different ones), and writes judged.json in --out
(per judge: the validation's metrics when it finished, and each task's graduated reward, pass and
faster-than-compile from its episodes on disk; the common tasks' sums).

    # here: seed 1's graduated and continuous actors after PPO step 3
    python scripts/judge_family_actors.py pack --to .famjudge \\
        --from git:d66189f:data/family/carry/t05/step3 --stage graduated/seed1/agentic_full=step3 \\
        --from git:8d6201c:data/family/carry/rewards --stage continuous/seed1/agentic_full=step3
    # CPU, toy size (2 held-out tasks):
    python scripts/judge_family_actors.py judge --actors .famjudge --out outputs/family/judged \\
        --actor outputs/family/actor --val-tasks 2 --val-temperature 0 --max-new-tokens 256
    # one GPU host (the family's validation settings; every actor at once on the host's cores;
    # --time-budget-s at least 40 s under the call's limit: a stopped judge gets 30 s to end):
    python3 scripts/judge_family_actors.py judge --actors .famjudge --out outputs/family/judged \\
        --actor /tmp/family_actor --trainer gpu --val-tasks 0 --val-temperature 0 --time-budget-s 480 \\
        --set sandbox.lane_cpus=0 --set sandbox.lane_slots=4 --set sampling.decoder=static
    # N GPUs: the same; the train.py runs share the host's cores, the first GPU decodes for all

Packed layout: <to>/<reward>/seed<k>/<label>.ckpt ({"state_dict": actor tensors}); `judge` writes
<out>/<reward>/seed<k>/judge_<label>/ (a train.py output_dir) and <out>/pipeline.jsonl. A judge
already finished there is not run again. Exit status: 0 when every actor was judged, 3 when the
time budget stopped one (rerun to continue), 1 when one failed, 2 with one line for unusable input.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))
import family_carry  # noqa: E402
import family_pipeline as fp  # noqa: E402
import family_state  # noqa: E402
import plot_family  # noqa: E402

# A packed actor's place: <reward>/seed<k>/<label>.ckpt
PACKED = re.compile(r"^(?P<reward>[a-z]+)/seed(?P<seed>\d+)/(?P<label>[A-Za-z0-9_.-]+)\.ckpt$")
# The held-out metrics reported, as the validation logs them.
REPORTED = ("val/graduated_reward_mean", "val/reward_mean", "val/pass_rate", "val/faster_than_compile",
            "val/faster_than_eager", "val/episodes")


def actor_state(src: Path, key: str, entry: dict) -> dict:
    """The actor's tensors of one carried stage, in float16 (what the judge loads back into float32)."""
    import torch

    state = family_state.carried_state(src, key, entry)["state_dict"]
    return {k: v.to(torch.float16) if v.is_floating_point() else v for k, v in state.items() if k.startswith("actor.")}


def pack(places: list[tuple[str, list[tuple[str, str]]]], to: Path) -> list[Path]:
    """Each (place, [(stage, label)]) stage's actor into ``to``; returns the files written."""
    import torch

    written = []
    with tempfile.TemporaryDirectory(prefix="judge_pack.") as tmp:
        for spec, stages in places:
            src = family_carry.state_folder(spec, Path(tmp))
            manifest = family_state.read_manifest(src)
            by_stage = {entry["stage"]: (key, entry) for key, entry in manifest.items()}
            for stage, label in stages:
                if stage not in by_stage:
                    raise family_state.StateError(f"{spec}: no weights of {stage} (it holds {', '.join(sorted(by_stage))})")
                reward, seed, _ = stage.split("/", 2)
                target = to / reward / seed / f"{label}.ckpt"
                if not PACKED.match(target.relative_to(to).as_posix()):
                    raise family_state.StateError(f"{stage}={label}: not a <reward>/seed<k>/<label> a judge can name")
                target.parent.mkdir(parents=True, exist_ok=True)
                torch.save({"state_dict": actor_state(src, *by_stage[stage])}, target)
                written.append(target)
    return written


def packed_actors(root: Path) -> list[tuple[str, int, str, Path]]:
    """(reward, seed, label, file) of every actor packed under ``root``."""
    found = []
    for path in sorted(root.rglob("*.ckpt")):
        m = PACKED.match(path.relative_to(root).as_posix())
        if m is None:
            raise family_state.StateError(f"{path}: not <reward>/seed<k>/<label>.ckpt under {root}")
        if m["reward"] not in fp.REWARDS:
            raise family_state.StateError(f"{path}: {m['reward']} is not a reward ({', '.join(fp.REWARDS)})")
        found.append((m["reward"], int(m["seed"]), m["label"], path))
    if not found:
        raise family_state.StateError(f"{root}: no packed actor (<reward>/seed<k>/<label>.ckpt)")
    return found


def judged_metrics(stage_dir: Path) -> Optional[dict]:
    """The start validation's metrics of a judge (None: not judged)."""
    series = plot_family.read_stage(stage_dir)
    if not series.get("val/episodes"):
        return None
    return {k: series[k][-1][1] for k in REPORTED if series.get(k)}


def task_scores(stage_dir: Path) -> dict[str, dict]:
    """Each held-out task a judge finished, from its episodes on disk (rollouts/val.jsonl; a judge
    stopped by the budget has them for the tasks it finished): the graduated reward (one scale
    for every arm), whether it passed and whether it beat torch.compile."""
    from src.data.rollout import COMMON_REWARD, rollout_metrics

    path = stage_dir / "rollouts" / "val.jsonl"
    scores = {}
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            row = json.loads(line)
        except ValueError:  # a judge killed mid-write leaves its last line cut: that episode is lost
            continue
        # One episode a task (val_samples_per_task 1); a later row of a task wins.
        m = rollout_metrics([row], [row], 0.0)
        scores[Path(row["task"]).stem] = {"graduated": m[f"rollout/{COMMON_REWARD}_reward_mean"],
                                          "passed": bool(m["rollout/pass_rate"]),
                                          "faster_than_compile": bool(m["rollout/faster_than_compile"])}
    return scores


def on_common_tasks(judged: dict[str, dict[str, dict]]) -> dict:
    """The judges compared on the tasks every one of them finished (the budget may stop them at
    different tasks): per judge, the summed graduated reward and the passes and faster-than-
    compile counts over those tasks."""
    sets = [set(scores) for scores in judged.values()]
    common = sorted(set.intersection(*sets)) if sets else []
    return {"tasks": common, "by_judge": {
        name: {"graduated_sum": sum(scores[t]["graduated"] for t in common),
               "passed": sum(scores[t]["passed"] for t in common),
               "faster_than_compile": sum(scores[t]["faster_than_compile"] for t in common)}
        for name, scores in judged.items()}}


def judge(args: argparse.Namespace, plan_argv: list[str]) -> int:
    out, _, _, _, settings = fp.planned(fp.parse_args([*plan_argv, "--out", args.out]))
    if not settings.actor or not Path(settings.actor, "config.json").exists():
        fp.usage_error(f"--actor {settings.actor or '(none)'} is not a model directory (the family actor's config and tokenizer)")
    actors = packed_actors(Path(args.actors))
    deadline = time.monotonic() + args.time_budget_s if args.time_budget_s else None
    log = out / "pipeline.jsonl"
    out.mkdir(parents=True, exist_ok=True)
    statuses: dict[Path, str] = {}

    def run(reward: str, seed: int, label: str, ckpt: Path) -> None:
        stage = fp.Stage(f"judge_{label}", "agentic_rl", judge=True)
        run_dir = out / reward / f"seed{seed}"
        overrides = fp.stage_overrides(stage, run_dir, reward, seed, settings) + [f"init_from={ckpt.absolute()}"]
        statuses[run_dir / stage.name] = fp.run_stage(run_dir / stage.name, overrides, deadline, log)

    threads = [threading.Thread(target=run, args=a) for a in actors]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows, scores = [], {}
    for stage_dir, status in sorted(statuses.items()):
        name = stage_dir.relative_to(out).as_posix()
        scores[name] = task_scores(stage_dir)
        row = {"judge": name, "status": status, "tasks_on_disk": len(scores[name]),
               **(judged_metrics(stage_dir) or {})}
        print(json.dumps(row))
        rows.append({**row, "tasks": scores[name]})
    common = on_common_tasks(scores)
    print(json.dumps({"common_tasks": len(common["tasks"]), **common["by_judge"]}))
    (out / "judged.json").write_text(json.dumps({"judges": rows, "common": common}, indent=1) + "\n")
    if "failed" in statuses.values():
        return 1
    return fp.INCOMPLETE if "stopped" in statuses.values() else 0


def parse_pack(argv: list[str]) -> tuple[Path, list[tuple[str, list[tuple[str, str]]]]]:
    """--to, then --from PLACE followed by its --stage STAGE=LABEL options, in order."""
    # Read by hand (each --stage belongs to the --from before it); the parser only words the errors.
    p = argparse.ArgumentParser(prog="judge_family_actors.py pack",
                                usage="%(prog)s --to DIR (--from PLACE --stage STAGE=LABEL [--stage ...]) ...")
    places: list[tuple[str, list[tuple[str, str]]]] = []
    i = 0
    to = None
    while i < len(argv):
        option, value = argv[i], argv[i + 1] if i + 1 < len(argv) else None
        if option not in ("--to", "--from", "--stage") or value is None:
            p.error(f"unexpected {option!r} (pack takes --to DIR, then --from PLACE --stage STAGE=LABEL ...)")
        if option == "--to":
            to = Path(value)
        elif option == "--from":
            places.append((value, []))
        else:
            stage, sep, label = value.partition("=")
            if not places or not sep or stage.count("/") != 2 or not label:
                p.error(f"--stage {value!r}: give STAGE=LABEL (reward/seedK/stage=label) after a --from")
            places[-1][1].append((stage, label))
        i += 2
    if to is None or not places or not all(stages for _, stages in places):
        p.error("give --to and at least one --from with its --stage options")
    return to, places


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("pack", "judge"):
        print(__doc__, file=sys.stderr)
        print("judge_family_actors.py: error: the first argument is pack or judge", file=sys.stderr)
        return 2
    try:
        if argv[0] == "pack":
            to, places = parse_pack(argv[1:])
            for path in pack(places, to):
                print(f"judge_family_actors: {path} ({path.stat().st_size / 1e6:.1f} MB)")
            return 0
        # No abbreviations: --actor (the pipeline's) would otherwise be read as --actors.
        p = argparse.ArgumentParser(prog="judge_family_actors.py judge", allow_abbrev=False,
                                    epilog="Other options are family_pipeline.py's validation settings (--actor, "
                                           "--trainer, --val-tasks, --val-temperature, --set, ...).")
        p.add_argument("--actors", required=True, help="what pack wrote")
        p.add_argument("--out", required=True)
        p.add_argument("--time-budget-s", type=float, default=0.0, help="stop the judges at this (0: no limit)")
        args, plan_argv = p.parse_known_args(argv[1:])
        return judge(args, plan_argv)
    except family_state.StateError as exc:
        print(f"judge_family_actors: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
