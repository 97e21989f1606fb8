"""Metrics files a resumed run continues instead of replacing."""
from __future__ import annotations

import csv

from lightning.fabric.loggers.csv_logs import _ExperimentWriter
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.logger import rank_zero_experiment


class _AppendingWriter(_ExperimentWriter):
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
