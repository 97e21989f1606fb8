"""The recipe's stages in one command (``python train.py experiment=paper pipeline=true``):
warm-up -> RFT (which samples the multi-turn trajectories) -> value pretraining on those same
trajectories -> agentic PPO, each stage in ``pipeline_dir/<stage>`` and started from the previous
stage's checkpoint (``init_from``).

Resumable stage by stage: a stage that finished wrote ``stage_done.json`` and a rerun skips it; a
stage killed midway resumes from its ``checkpoints/last.ckpt`` (every stage runs with
``ckpt_path=last``). Every stage's config is composed before the first one trains, so an override
one stage cannot take fails at once, not hours in. The command line's overrides apply to every
stage; ``pipeline_overrides.<stage>=[...]`` to one.
"""
from __future__ import annotations

import json
import logging
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from omegaconf import DictConfig, OmegaConf, open_dict

log = logging.getLogger("train.pipeline")
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
# Written into a stage's directory once it has finished: the rerun's reason to skip it.
DONE_FILE = "stage_done.json"
# Settings the pipeline sets per stage itself; the command line's values of these are not passed on.
OWN_KEYS = ("pipeline", "stage", "output_dir", "init_from", "ckpt_path")
# Where RFT's sampled trajectories land, merged over ranks, for value pretraining to fit.
RFT_SAMPLES = Path("rollouts") / "sample.jsonl"


@contextmanager
def config_source() -> Iterator[None]:
    """Hydra's compose API over conf/: inside a @hydra.main job it is already set up."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        yield
        return
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        yield


def override_key(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0]


def stage_overrides(cfg: DictConfig, overrides: Sequence[str], index: int, root: Path,
                    trajectories: str = "") -> list[str]:
    """The overrides that compose stage ``index`` of the pipeline: the command line's (but the
    pipeline's own keys), this stage's directory and init_from, RFT's trajectories for value
    pretraining, then the stage's pipeline_overrides."""
    stages = list(cfg.pipeline_stages)
    name = stages[index]
    passed = [o for o in overrides if override_key(o) not in OWN_KEYS]
    init_from = cfg.init_from if index == 0 else str(root / stages[index - 1])
    own = [f"stage={name}", f"output_dir={root / name}", f"init_from={init_from or 'null'}", "ckpt_path=last",
           "pipeline=false"]
    if name == "value_pretrain" and trajectories:
        own.append(f"stage.module.trajectories={trajectories}")
    return passed + own + list(cfg.pipeline_overrides.get(name) or [])


def compose_stages(overrides: Sequence[str], settings: Mapping[str, Any]) -> tuple[Path, list[DictConfig]]:
    """The pipeline's directory and every stage's composed config, ``settings`` (the sweep job's
    directory, W&B group and name: src/sweeps.py) applied to each."""
    from train import UsageError

    with config_source():
        root_cfg = apply_settings(compose_train(overrides, "pipeline"), settings)
        stages = list(root_cfg.pipeline_stages)
        unknown = [s for s in stages if not (CONF_DIR / "stage" / f"{s}.yaml").is_file()]
        if unknown or not stages:
            raise UsageError(f"pipeline_stages {stages}: {unknown or 'empty'}; choose from "
                             f"{sorted(p.stem for p in (CONF_DIR / 'stage').glob('*.yaml'))}")
        root = Path(root_cfg.pipeline_dir).expanduser().absolute()
        configs, trajectories = [], ""
        for i, name in enumerate(stages):
            cfg = compose_train(stage_overrides(root_cfg, overrides, i, root, trajectories), f"pipeline stage {name}")
            configs.append(apply_settings(cfg, settings, stage=name))
            if name == "rft":  # value pretraining fits what RFT read or sampled
                trajectories = cfg.stage.module.trajectories or str(root / name / RFT_SAMPLES)
    return root, configs


def compose_train(overrides: Sequence[str], what: str) -> DictConfig:
    """conf/train.yaml with ``overrides``; one that does not compose (e.g. an override of a field
    this stage does not have) is one line naming ``what``."""
    from hydra import compose
    from hydra.errors import HydraException

    from train import UsageError

    try:
        return compose(config_name="train", overrides=list(overrides))
    except HydraException as exc:
        raise UsageError(f"{what}: {' '.join(str(exc).split())}") from None


def apply_settings(cfg: DictConfig, settings: Mapping[str, Any], stage: str = "") -> DictConfig:
    """``settings`` (dotted keys) set on ``cfg``; a pipeline stage's W&B run is named and grouped
    by its pipeline."""
    with open_dict(cfg):
        for key, value in settings.items():
            if key not in ("output_dir", "pipeline_dir") or not stage:
                OmegaConf.update(cfg, key, value, merge=False)
        wandb = (cfg.get("logger") or {}).get("wandb")
        if stage and wandb is not None:
            label = wandb.name or Path(cfg.output_dir).parent.name
            wandb.name = f"{label}/{stage}"
            wandb.group = wandb.group or Path(cfg.output_dir).parent.name
    return cfg


def merge_rank_files(run: Path) -> Path:
    """RFT's sampled trajectories of every rank as one file (idempotent; atomic, so that every
    rank may write it and a reader never sees half of it)."""
    rollouts = run / "rollouts"
    target = run / RFT_SAMPLES
    parts = sorted(rollouts.glob("sample.rank*.jsonl"))
    if parts:
        partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
        partial.write_text("".join(p.read_text() for p in parts))
        os.replace(partial, target)
    return target


def run_pipeline(overrides: Sequence[str], settings: Mapping[str, Any] | None = None) -> dict[str, dict[str, float]]:
    """Run the configured stages in order (finished ones skipped); returns each stage's last metrics."""
    from train import train

    root, configs = compose_stages(overrides, settings or {})
    results: dict[str, dict[str, float]] = {}
    for cfg in configs:
        name, out = cfg.stage.name, Path(cfg.output_dir)
        done = out / DONE_FILE
        if done.is_file():
            log.info("pipeline: %s finished earlier (%s): skipped", name, done)
            results[name] = json.loads(done.read_text())["metrics"]
            continue
        if name == "value_pretrain" and (root / "rft").is_dir():
            merge_rank_files(root / "rft")
        log.info("pipeline: %s in %s (init_from %s)", name, out, cfg.init_from)
        results[name] = train(cfg)
        if name == "rft":
            merge_rank_files(out)
        done.write_text(json.dumps({"stage": name, "metrics": results[name],
                                    "checkpoint": str(out / "checkpoints" / "last.ckpt")}, indent=1))
    log.info("pipeline %s: %s done", root, ", ".join(results))
    return results
