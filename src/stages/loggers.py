"""Metrics files a resumed run continues instead of replacing; the run's config logged with its
metrics; W&B runs ended when their run ends."""
from __future__ import annotations

import csv
from typing import Any

from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment


class _AppendingWriter(ExperimentWriter):
    """Lightning deletes an existing metrics.csv when a writer starts; a resumed run (train.py
    refuses a fresh run into a directory that holds one) keeps its rows and their columns."""

    def _check_log_dir_exists(self) -> None:
        if self._fs.isfile(self.metrics_file_path):
            with self._fs.open(self.metrics_file_path, "r", newline="") as file:
                self.metrics_keys = list(next(csv.reader(file), []))


class AppendingCSVLogger(CSVLogger):
    """Lightning's CSV logger with the appending writer."""

    @property
    @rank_zero_experiment
    def experiment(self) -> _AppendingWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _AppendingWriter(log_dir=self.log_dir)
        return self._experiment


def log_run_config(loggers: list, cfg: Any) -> None:
    """The resolved config as every logger's hyperparameters (W&B's run config, hparams.yaml
    beside metrics.csv), so that runs of one sweep can be told apart by any setting."""
    from omegaconf import OmegaConf

    resolved = OmegaConf.to_container(cfg, resolve=True)
    for logger in loggers:
        logger.log_hyperparams(resolved)


def finish_runs(loggers: list) -> None:
    """End this run's W&B run: Lightning leaves it open, and the next run in this process (a
    sweep's next job, a pipeline's next stage) would otherwise log into it."""
    from lightning.pytorch.loggers import WandbLogger

    for logger in loggers:
        if isinstance(logger, WandbLogger) and logger._experiment is not None:
            logger.experiment.finish()
