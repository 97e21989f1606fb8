"""Offline Weights & Biases runs from the family pipeline's metrics.csv files, one run per stage
run, for runs made where wandb could not go (the lent GPU host: wandb and its needs are 24 MB of
wheels, which do not fit beside the stage weights a call carries; scripts/family_pipeline.py ran
with --logger csv there). Each W&B run holds the stage's metrics against their training step
(`trainer/global_step`, as Lightning logs it; the held-out val/ ones at the step they were
measured, -1 for a PPO stage's validation before training), its hparams.yaml as the config, and is grouped
as family_pipeline --logger wandb groups its own: group ``<reward>-<stage>``, name
``<reward>-seed<k>-<stage>``. W&B's own timestamps are those of this conversion, not of training.

    python scripts/family_wandb.py --runs outputs/family/runs --out outputs/family/wandb
    wandb sync outputs/family/wandb/wandb/offline-run-*      # later, on a machine with an account

Reads <runs>/<reward>/seed<k>/<stage>/metrics.csv (stages set aside, e.g. rft.uncarried, are
skipped); exit 2 with one line when --runs holds none.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plot_family import BEFORE_TRAINING_STEP, read_metrics, start_validation  # noqa: E402

PROJECT = "cuda-agent-family"
# The x-axis metric, named as Lightning's WandbLogger names it.
GLOBAL_STEP = "trainer/global_step"


def stage_runs(root: Path) -> list[Path]:
    """Every stage directory with metrics: <reward>/seed<k>/<stage>, names without a dot."""
    return [p.parent for p in sorted(root.glob("*/seed*/*/metrics.csv")) if "." not in p.parent.name]


def rows_by_step(stage_dir: Path) -> list[tuple[int, dict[str, float]]]:
    """The metrics of each step, merged across the rows that share it (training and val/ rows).
    A PPO stage whose validation before training another stage judged (start_validation.json:
    the same actor validated once per seed, or the stage's own kept from an earlier start) gets
    that validation at step -1, as plot_family.py counts it."""
    own = read_metrics(stage_dir / "metrics.csv")
    steps: dict[int, dict[str, float]] = {}
    for key, points in own.items():
        for step, value in points:
            steps.setdefault(step, {})[key] = value
    if BEFORE_TRAINING_STEP not in steps:
        for key, points in start_validation(stage_dir, own).items():
            for step, value in points:
                if step == BEFORE_TRAINING_STEP and key.startswith("val/"):
                    steps.setdefault(step, {})[key] = value
    return sorted(steps.items())


def hparams(stage_dir: Path) -> dict:
    path = stage_dir / "hparams.yaml"
    if not path.exists():
        return {}
    import yaml

    return yaml.safe_load(path.read_text()) or {}


def write_run(stage_dir: Path, out: Path, project: str) -> None:
    import wandb

    reward, seed, stage = stage_dir.parent.parent.name, stage_dir.parent.name, stage_dir.name
    run = wandb.init(mode="offline", dir=str(out), project=project, group=f"{reward}-{stage}",
                     name=f"{reward}-{seed}-{stage}", job_type=stage, config=hparams(stage_dir),
                     tags=[reward, seed, stage],
                     settings=wandb.Settings(silent=True, console="off"))
    try:
        # As Lightning's WandbLogger logs (`--logger wandb`): the training step as the metric
        # `trainer/global_step`, the x-axis of every other one. W&B's own step must start at 0
        # and only grow, and a PPO stage logs its validation before training at step -1.
        run.define_metric(GLOBAL_STEP)
        run.define_metric("*", step_metric=GLOBAL_STEP, step_sync=True)
        for step, metrics in rows_by_step(stage_dir):
            run.log({**metrics, GLOBAL_STEP: step})
    finally:
        run.finish()


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", required=True, help="family_pipeline.py's --out")
    p.add_argument("--out", required=True, help="where the offline runs go (<out>/wandb/offline-run-*)")
    p.add_argument("--project", default=PROJECT)
    args = p.parse_args(argv)
    stages = stage_runs(Path(args.runs))
    if not stages:
        print(f"error: no <reward>/seed<k>/<stage>/metrics.csv under {args.runs}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("WANDB_MODE", "offline")
    try:
        for stage_dir in stages:
            write_run(stage_dir, out, args.project)
            print(f"{stage_dir.relative_to(args.runs)}: offline W&B run written", file=sys.stderr)
    finally:
        import wandb

        # run.finish() only asks W&B's service to close the run's file; the service may still be
        # writing it (seen under load: a file without its run record). Waiting for the service
        # to stop means every file is whole when this returns.
        wandb.teardown()
    print(f"{len(stages)} offline runs in {out / 'wandb'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
