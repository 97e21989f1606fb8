"""Hydra multirun sweeps of train.py (``python train.py -m reward=graduated,binary,continuous``):
each job writes into its own directory under the sweep's (``hydra.sweep.dir``), named from the
overrides the sweep varies, and its W&B run joins the sweep's group under that same name, so
W&B's run comparison (and ``python -m src.compare SWEEP_DIR``) can line the runs up.

Which overrides a sweep varies is known only to the process that launched it: the callback below
reads the command line's sweep overrides when the multirun starts and leaves their keys in the
environment, where every job (in this process, or a Slurm job submitit started from it) finds them.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

# The keys a running sweep varies, comma-separated (set by SweepNames when a multirun starts).
SWEEP_KEYS_ENV = "CUDA_AGENT_SWEEP_KEYS"


class SweepNames(Callback):
    """hydra.callbacks entry of conf/train.yaml: records the swept keys for the jobs."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        parsed = OverridesParser.create().parse_overrides(list(config.hydra.overrides.task))
        os.environ[SWEEP_KEYS_ENV] = ",".join(o.key_or_group for o in parsed if o.is_sweep_override())


def swept_label(task_overrides: Sequence[str]) -> str:
    """The job's overrides of the keys its sweep varies, e.g. ``reward=binary,experiment=no_rft``
    ('/' made '_' so that it names one directory); "run" when none is known."""
    keys = set(filter(None, os.environ.get(SWEEP_KEYS_ENV, "").split(",")))
    chosen = [o for o in task_overrides if o.lstrip("+~").split("=", 1)[0] in keys]
    return ",".join(chosen).replace("/", "_") or "run"


def register_resolvers() -> None:
    """``${sweep_label:${hydra.overrides.task}}`` names a job's directory (conf/train.yaml)."""
    if not OmegaConf.has_resolver("sweep_label"):
        OmegaConf.register_new_resolver("sweep_label", lambda overrides: swept_label(list(overrides)))


def job_settings(cfg: DictConfig) -> dict[str, Any]:
    """What a multirun job sets over its composed config: its directory as the run's (or the
    pipeline's) directory, and its W&B group (the sweep directory's name) and run name (the swept
    overrides). Empty outside a multirun."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return {}
    hydra_cfg = HydraConfig.get()
    settings: dict[str, Any] = {"pipeline_dir" if cfg.pipeline else "output_dir": hydra_cfg.runtime.output_dir}
    wandb = cfg.logger.get("wandb") if cfg.get("logger") else None
    if wandb is not None:
        settings["logger.wandb.group"] = wandb.group or Path(hydra_cfg.sweep.dir).name
        settings["logger.wandb.name"] = wandb.name or swept_label(list(hydra_cfg.overrides.task))
    return settings
