"""Plot the family pipeline's runs (scripts/family_pipeline.py --out DIR): learning curves of
agentic PPO and held-out results before vs after PPO, mean and spread over seeds, per
condition (reward x ablation).

    python scripts/plot_family.py --runs outputs/family/runs --out docs/figures

Reads <runs>/<reward>/seed<k>/<stage>/metrics.csv; writes to --out:
  family_curves.png   (and _rewards.png: full pipeline per reward; _ablations.png: graduated
                      per ablation, where there are several) per PPO step: rollout reward mean, pass rate, faster-than-compile rate,
                      entropy, explained variance (line: mean over seeds; band: min to max)
  family_heldout.png  held-out (val/) reward mean read by the graduated reward (one scale for every
                      reward), pass rate, faster-than-compile rate before PPO
                      (the actor it starts from: RFT's, or the warm-up's without RFT) and after PPO
                      (bar: mean; whisker: min to max)
  family_summary.json / family_summary.md  the same numbers, per seed and aggregated, with each
                      seed's change (after - before) and whether after is above before beyond
                      the spread of seeds (every seed's after above every seed's before), and
                      how each stage's held-out episodes were decoded (greedy, or sampled at T)

The "before" point is the held-out validation before PPO's first update (val/* at step -1:
stage.module.validate_at_start, which family_pipeline.py sets): the stage's own, or, for a stage
starting from an actor another PPO stage of the seed validated, that one's (start_validation.json
names it); runs made before either existed fall back on the start stage's last validation.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path
from typing import Optional, Sequence

CURVES = (("rollout/reward_mean", "rollout reward mean (the run's own reward)"), ("rollout/pass_rate", "pass rate"),
          ("rollout/faster_than_compile", "faster than torch.compile"), ("actor/entropy", "entropy"),
          ("critic/explained_var", "explained variance"))
# The held-out reward read by the graduated reward whatever the run trains on
# (src/data/rollout.COMMON_REWARD): the one reward mean that compares runs of different rewards.
COMMON_REWARD = "graduated"
COMMON_HELDOUT = f"val/{COMMON_REWARD}_reward_mean"
HELDOUT = ((COMMON_HELDOUT, f"held-out reward mean, read by the {COMMON_REWARD} reward"),
           ("val/pass_rate", "held-out pass rate"), ("val/faster_than_compile", "held-out faster than compile"))
# In the summary, not plotted: the paper's evaluation rule (an episode counts its best correct
# state), and the held-out reward mean by the run's own reward.
HELDOUT_SUMMARY = (("val/best_reward_mean", "held-out best-state reward mean"),
                   ("val/best_pass_rate", "held-out best-state pass rate"),
                   ("val/best_faster_than_compile", "held-out best-state faster than compile"),
                   ("val/reward_mean", "held-out reward mean, the run's own reward"))
HELDOUT_KEYS = tuple(k for k, _ in HELDOUT + HELDOUT_SUMMARY)
# Runs without a validation before PPO's first update: the stage whose held-out metrics stand
# for the actor PPO starts from (value pretraining does not change the actor). no_rft starts from
# the warm-up, whose validation is single-turn, so it has no comparable multi-turn point.
START = {"full": "rft", "no_value": "rft"}
# The step the PPO stage logs its validation before training at (src/stages/common.py).
BEFORE_TRAINING_STEP = -1
# Where a PPO stage that another one validated for names it (scripts/family_pipeline.py).
START_VALIDATION = "start_validation.json"
# Per ablation, the stage that judges its PPO stage's start actor again, alone (family_pipeline.py
# --judge-starts): the before point where the PPO stage's start and end ran on different hosts.
JUDGE = {"full": "judge_rft", "no_value": "judge_rft", "no_rft": "judge_warmup"}


def read_metrics(path: Path) -> dict[str, list[tuple[int, float]]]:
    """metric name -> [(step, value)] of one metrics.csv (empty cells skipped, order kept)."""
    series: dict[str, list[tuple[int, float]]] = {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            step = int(float(row.get("step") or 0))
            for key, value in row.items():
                if key not in ("step", "epoch") and value not in (None, ""):
                    series.setdefault(key, []).append((step, float(value)))
    return series


def read_stage(stage: Path) -> dict[str, list[tuple[int, float]]]:
    """The metrics of one stage (<runs>/<reward>/seed<k>/<stage>), empty where it has none."""
    path = stage / "metrics.csv"
    return read_metrics(path) if path.is_file() else {}


def on_common_scale(series: dict[str, list[tuple[int, float]]], stage: Path) -> dict[str, list[tuple[int, float]]]:
    """``series`` (``stage``'s metrics) with the reward mean's graduated reading filled in from
    the stage's own reward mean where the stage trains on that reward (runs from before the
    reading was logged, 2026-12-07). A stage of another reward that lacks the reading gets none:
    scales are never mixed."""
    if stage.parent.parent.name != COMMON_REWARD:
        return series
    filled = dict(series)
    for prefix in ("val/", "rollout/"):
        if f"{prefix}reward_mean" in filled:
            filled.setdefault(f"{prefix}{COMMON_REWARD}_reward_mean", filled[f"{prefix}reward_mean"])
    return filled


def find_runs(root: Path) -> dict[tuple[str, str], dict[int, Path]]:
    """(reward, ablation) -> {seed: run directory} of every agentic stage with metrics."""
    runs: dict[tuple[str, str], dict[int, Path]] = {}
    for csv_path in sorted(root.glob("*/seed*/agentic_*/metrics.csv")):
        stage_dir = csv_path.parent
        if "." in stage_dir.name:  # kept beside a stage (<stage>.start, <stage>.uncarried): not a run
            continue
        reward, seed = stage_dir.parent.parent.name, int(stage_dir.parent.name[4:])
        runs.setdefault((reward, stage_dir.name[len("agentic_"):]), {})[seed] = stage_dir.parent
    return runs


def spread(values: Sequence[float]) -> dict[str, float]:
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return {"mean": mean, "std": std, "min": min(values), "max": max(values), "n": n}


def last(series: dict[str, list[tuple[int, float]]], key: str) -> Optional[float]:
    """The last value of ``key`` logged after a training update (not the start validation)."""
    after = [v for step, v in series.get(key, []) if step != BEFORE_TRAINING_STEP]
    return after[-1] if after else None


def at_start(series: dict[str, list[tuple[int, float]]], key: str) -> Optional[float]:
    """The value of ``key`` from the validation before the first update, if one ran."""
    return next((v for step, v in series.get(key, []) if step == BEFORE_TRAINING_STEP), None)


def start_metrics(run: Path, start: Optional[str]) -> dict[str, list[tuple[int, float]]]:
    """The start stage's metrics: the run's own, or the shared graduated-reward stage's
    (family_pipeline.py --reward-stages agentic)."""
    if not start:
        return {}
    for stage in (run / start, run.parent.parent / "graduated" / run.name / start):
        if (stage / "metrics.csv").exists():
            return on_common_scale(read_stage(stage), stage)
    return {}


def validated_by(stage: Path, ppo: dict[str, list[tuple[int, float]]]) -> Optional[tuple[Path, dict[str, list[tuple[int, float]]]]]:
    """The stage whose metrics hold a PPO stage's held-out validation before its first update
    (step -1), and those metrics as logged: ``stage`` and ``ppo``, its own, if they have it; else
    the stage that validated the same actor for it, reached through start_validation.json
    (family_pipeline.py: one validation per seed and start actor, or the stage's own kept from an
    earlier start, <stage>.start, which may itself be named by another stage: a few hops at most);
    None if none is found."""
    runs_root = stage.parent.parent.parent
    series = ppo
    for _ in range(4):
        if any(at_start(series, k) is not None for k in HELDOUT_KEYS):
            return stage, series
        pointer = stage / START_VALIDATION
        if not pointer.exists():
            return None
        stage = runs_root / json.loads(pointer.read_text())["stage"]
        series = read_stage(stage)
    return (stage, series) if any(at_start(series, k) is not None for k in HELDOUT_KEYS) else None


def start_validation(stage: Path, ppo: dict[str, list[tuple[int, float]]]) -> dict[str, list[tuple[int, float]]]:
    """The metrics (as logged) that hold a PPO stage's validation before its first update
    (validated_by); empty if none is found."""
    found = validated_by(stage, ppo)
    return found[1] if found else {}


def judged_again(run: Path, ablation: str, hosts: Sequence[str]) -> Optional[Path]:
    """The judge stage (JUDGE) whose held-out point stands for the PPO stage's start actor: only
    where the PPO stage's first and last runs were on different hosts (its own start point was
    judged by another machine's CPU timing than its end) and the judge ran on the last one.
    ``hosts``: the PPO stage's (judging_hosts)."""
    judge = run / JUDGE[ablation]
    if not hosts or hosts[0] == hosts[-1] or not (judge / "metrics.csv").is_file():
        return None
    judged = read_stage(judge)
    if judging_hosts(judge)[-1:] != hosts[-1:] or not any(at_start(judged, k) is not None for k, _ in HELDOUT):
        return None
    return judge


def before_ppo(run: Path, ablation: str, ppo: dict[str, list[tuple[int, float]]],
               judge: Optional[Path] = None) -> dict[str, Optional[float]]:
    """Held-out metrics of the actor a PPO stage starts from: the judge stage's (``judge``, from
    judged_again: on the host of the stage's end where its start was judged on another); else its
    validation before its first update (start_validation); else, for runs from before that
    existed, the start stage's last validation."""
    if judge is not None:
        judged = on_common_scale(read_stage(judge), judge)
        return {k: at_start(judged, k) for k in HELDOUT_KEYS}
    found = validated_by(run / f"agentic_{ablation}", ppo)
    if found:
        validated = on_common_scale(found[1], found[0])
        return {k: at_start(validated, k) for k in HELDOUT_KEYS}
    start = start_metrics(run, START.get(ablation))
    return {k: last(start, k) for k in HELDOUT_KEYS}


def judging_hosts(stage: Path) -> list[str]:
    """The hosts that ran ``stage`` (<runs>/<reward>/seed<k>/<stage>), in the order of the
    pipeline's journal (<runs>/pipeline.jsonl, whose lines name the host since 2026-12-06), a
    host repeated only where another ran the stage in between (A, B, A: it ended on A): a PPO
    stage carried over calls may have been judged before and after on different kinds of host,
    whose CPU timing (the family's sandbox) differs. Empty where the journal does not say."""
    journal = stage.parent.parent.parent / "pipeline.jsonl"
    if not journal.is_file():
        return []
    tail = "/" + "/".join(stage.parts[-3:])
    hosts: list[str] = []
    for line in journal.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if ("/" + str(entry.get("stage", "")).replace("\\", "/")).endswith(tail) and entry.get("host") \
                and hosts[-1:] != [entry["host"]]:
            hosts.append(entry["host"])
    return hosts


def heldout_decoding(stage: Path) -> Optional[str]:
    """How the stage's held-out episodes were decoded, from the run's config (hparams.yaml):
    "greedy", or "T=<t>" (sampled; runs from before sampling.val_temperature sample at the
    rollouts' temperature). None where the config is not there."""
    import yaml

    path = stage / "hparams.yaml"
    if not path.is_file():
        return None
    sampling = (yaml.safe_load(path.read_text()) or {}).get("sampling") or {}
    temperature = sampling.get("val_temperature")
    if temperature is None:
        temperature = sampling.get("temperature", 1.0)
    return "greedy" if float(temperature) == 0 else f"T={float(temperature):g}"


def summarise(runs: dict[tuple[str, str], dict[int, Path]]) -> dict[str, dict]:
    """Per condition: final held-out metrics after the start stage and after PPO, per seed and
    aggregated; the final training-rollout metrics too."""
    out = {}
    for (reward, ablation), seeds in sorted(runs.items()):
        per_seed = {}
        for seed, run in sorted(seeds.items()):
            stage = run / f"agentic_{ablation}"
            ppo = on_common_scale(read_stage(stage), stage)
            hosts = judging_hosts(stage)
            judge = judged_again(run, ablation, hosts)
            per_seed[seed] = {"after_ppo": {k: last(ppo, k) for k in HELDOUT_KEYS + tuple(k for k, _ in CURVES)},
                              "before_ppo": before_ppo(run, ablation, ppo, judge),
                              "hosts": hosts,
                              "heldout_decoding": heldout_decoding(stage),
                              "before_judged_by": judge.name if judge else None}
        agg = {}
        for when in ("after_ppo", "before_ppo"):
            keys = {k for s in per_seed.values() for k, v in s[when].items() if v is not None}
            agg[when] = {k: spread([s[when][k] for s in per_seed.values() if s[when].get(k) is not None])
                         for k in sorted(keys)}
        out[f"{reward}/{ablation}"] = {"seeds": per_seed, "aggregate": agg, "change": changes(per_seed)}
    return out


def changes(per_seed: dict[int, dict]) -> dict[str, dict]:
    """Per held-out metric, over the seeds that have both points: each seed's change (after PPO
    minus before), their spread, and ``above_beyond_spread``: the lowest seed after PPO above the
    highest seed before it (the issue's "beyond the spread of seeds"; None for a single seed)."""
    out = {}
    for key in HELDOUT_KEYS:
        pairs = {seed: (s["before_ppo"].get(key), s["after_ppo"].get(key)) for seed, s in per_seed.items()}
        pairs = {seed: p for seed, p in pairs.items() if None not in p}
        if not pairs:
            continue
        befores, afters = [b for b, _ in pairs.values()], [a for _, a in pairs.values()]
        # One seed has no spread to be beyond: no verdict.
        out[key] = {"per_seed": {seed: a - b for seed, (b, a) in pairs.items()},
                    "spread": spread([a - b for b, a in pairs.values()]),
                    "above_beyond_spread": min(afters) > max(befores) if len(pairs) > 1 else None}
    return out


def curve_stats(seeds: dict[int, Path], ablation: str, key: str) -> tuple[list[int], list[float], list[float], list[float]]:
    """Steps every seed logged, and the mean, min and max over seeds at each."""
    by_seed = [dict(read_stage(run / f"agentic_{ablation}").get(key, [])) for run in seeds.values()]
    steps = sorted(set.intersection(*(set(s) for s in by_seed))) if by_seed else []
    values = [[s[t] for s in by_seed] for t in steps]
    return steps, [sum(v) / len(v) for v in values], [min(v) for v in values], [max(v) for v in values]


def plot_curves(runs: dict, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(CURVES), figsize=(4.2 * len(CURVES), 3.6))
    for (reward, ablation), seeds in sorted(runs.items()):
        for ax, (key, _) in zip(axes, CURVES):
            steps, mean, low, high = curve_stats(seeds, ablation, key)
            if not steps:
                continue
            line, = ax.plot(steps, mean, label=f"{reward} / {ablation} ({len(seeds)} seeds)")
            ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.2)
    for ax, (_, panel) in zip(axes, CURVES):
        ax.set_title(panel)
        ax.set_xlabel("agentic PPO step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Task family, agentic PPO, {title}: training rollouts (mean over seeds, band: min to max)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_heldout(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(HELDOUT), figsize=(5 * len(HELDOUT), 3.8))
    names = list(summary)
    for ax, (key, title) in zip(axes, HELDOUT):
        for offset, when, label in ((-0.2, "before_ppo", "before PPO"), (0.2, "after_ppo", "after PPO")):
            xs, means, errs = [], [], [[], []]
            for i, name in enumerate(names):
                s = summary[name]["aggregate"][when].get(key)
                if s is not None:
                    xs.append(i + offset)
                    means.append(s["mean"])
                    errs[0].append(s["mean"] - s["min"])
                    errs[1].append(s["max"] - s["mean"])
            ax.bar(xs, means, width=0.4, yerr=errs, capsize=3, label=label)
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    decoding = sorted({str(d["heldout_decoding"]) for s in summary.values() for d in s["seeds"].values()})
    fig.suptitle(f"Task family, held-out tasks, episodes decoded {' / '.join(decoding)} "
                 "(bar: mean over seeds; whisker: min to max)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def markdown(summary: dict) -> str:
    """Per condition and held-out metric: before PPO, after it (mean ± std over seeds), each
    seed's change, and whether after is above before beyond the spread of seeds."""
    lines = ["| condition | held-out metric | seeds | before PPO | after PPO | change per seed | above beyond spread |",
             "|---|---|---|---|---|---|---|"]
    for name, s in summary.items():
        for key, title in HELDOUT + HELDOUT_SUMMARY:
            if all(s["aggregate"][when].get(key) is None for when in ("before_ppo", "after_ppo")):
                continue  # runs from before the metric existed
            cells = []
            for when in ("before_ppo", "after_ppo"):
                v = s["aggregate"][when].get(key)
                cells.append("-" if v is None else f"{v['mean']:.3f} ± {v['std']:.3f}")
            change = s["change"].get(key)
            per_seed = ", ".join(f"{d:+.3f}" for _, d in sorted(change["per_seed"].items())) if change else "-"
            verdict = {None: "-", True: "yes", False: "no"}[change and change["above_beyond_spread"]]
            lines.append(f"| {name} | {title} | {len(s['seeds'])} | {cells[0]} | {cells[1]} | {per_seed} | {verdict} |")
    lines += ["", "Hosts that ran each PPO stage (from pipeline.jsonl; the CPU sandbox times on the host):"]
    lines += [f"- {name} seed {seed}: {'; then '.join(d.get('hosts') or ['not recorded'])}"
              + (f" (before PPO: {d['before_judged_by']}, judged again on the last)" if d.get("before_judged_by") else "")
              + f"; held-out episodes decoded {d.get('heldout_decoding') or 'as not recorded'}"
              for name, s in summary.items() for seed, d in sorted(s["seeds"].items())]
    return "\n".join(lines) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", required=True, help="family_pipeline.py's --out")
    p.add_argument("--out", required=True, help="directory for the PNGs and the summary")
    args = p.parse_args(argv)
    runs = find_runs(Path(args.runs))
    if not runs:
        print(f"plot_family: error: no agentic stage with metrics.csv under {args.runs}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = summarise(runs)
    plot_curves(runs, out / "family_curves.png", "every condition")
    # The two comparisons the paper makes: rewards on the full pipeline, ablations on graduated.
    for name, subset, title in (("rewards", {k: v for k, v in runs.items() if k[1] == "full"}, "rewards (full pipeline)"),
                                ("ablations", {k: v for k, v in runs.items() if k[0] == "graduated"},
                                 "ablations (graduated reward)")):
        if len(subset) > 1:
            plot_curves(subset, out / f"family_curves_{name}.png", title)
    plot_heldout(summary, out / "family_heldout.png")
    (out / "family_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (out / "family_summary.md").write_text(markdown(summary))
    print(markdown(summary), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
