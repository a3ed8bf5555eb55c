"""A resumed run's metrics.csv: the rows before its first logged step stay, the rest are replaced."""

import csv

from lightning.pytorch.loggers import CSVLogger

from stable_rl.cli.run_log import keep_history


def test_rows_from_the_first_resumed_step_are_replaced_and_a_cut_line_dropped(tmp_path):
    run = tmp_path / "run" / "version_0"
    run.mkdir(parents=True)
    (run / "metrics.csv").write_text("epoch,step,train/reward\n0,0,0.1\n0,1,0.2\n0,2,0.3\n0,3")  # step 3 cut off
    logger = CSVLogger(tmp_path, name="run", version=0)
    keep_history([logger])
    logger.log_metrics({"train/reward": 0.5, "train/kl": 0.01}, step=2)
    logger.save()
    with open(run / "metrics.csv") as file:
        rows = list(csv.DictReader(file))
    assert rows == [
        {"epoch": "0", "step": "0", "train/kl": "", "train/reward": "0.1"},
        {"epoch": "0", "step": "1", "train/kl": "", "train/reward": "0.2"},
        {"epoch": "", "step": "2", "train/kl": "0.01", "train/reward": "0.5"},
    ]


def test_a_new_version_folder_is_left_to_lightning(tmp_path):
    logger = CSVLogger(tmp_path, name="run")
    keep_history([logger])
    assert type(logger.experiment).__name__ == "ExperimentWriter"
