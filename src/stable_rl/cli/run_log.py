"""A run's ``metrics.csv`` across resumes. Lightning's ``CSVLogger`` deletes ``metrics.csv`` when it opens a
version folder that has one, as a run resumed into its own folder (``--ckpt_path=last``) does: the steps before
the checkpoint were lost. A resumed run's log keeps them; from the first step it logs, its rows replace the old
ones (the steps after the checkpoint, trained again)."""

import csv
import os
from pathlib import Path

from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter

from stable_rl.compat.lightning import set_csv_writer


class ResumedLogWriter(ExperimentWriter):
    """``CSVLogger``'s writer for a version folder whose ``metrics.csv`` goes on."""

    def __init__(self, log_dir: str) -> None:
        self._first_save = True
        super().__init__(log_dir)

    def _check_log_dir_exists(self) -> None:
        """Lightning's deletes ``metrics.csv`` here."""

    def save(self) -> None:
        if self._first_save and self.metrics:
            self._first_save = False
            self._keep_rows_before(min(int(row["step"]) for row in self.metrics))
        super().save()

    def _keep_rows_before(self, step: int) -> None:
        """Keep the rows of steps before ``step`` (a line cut by a crash is dropped), and their columns."""
        path = Path(self.metrics_file_path)
        if not path.is_file():
            return
        with open(path, newline="") as file:
            reader = csv.DictReader(file)
            rows = [r for r in reader if None not in r.values() and r["step"].isdigit() and int(r["step"]) < step]
            columns = list(reader.fieldnames or [])
        staged = path.with_name(f".{path.name}.partial")
        with open(staged, "w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
        os.replace(staged, path)
        self.metrics_keys = sorted(columns)


def keep_history(loggers: list) -> None:
    """Give every ``CSVLogger`` whose version folder has a ``metrics.csv`` a writer that keeps it (rank 0)."""
    for logger in loggers:
        if isinstance(logger, CSVLogger) and (Path(logger.log_dir) / ExperimentWriter.NAME_METRICS_FILE).is_file():
            set_csv_writer(logger, ResumedLogWriter(logger.log_dir))
