"""HeldOutOutcomes: each evaluation problem's correct samples per validation, appended to a CSV per process."""

import csv
from types import SimpleNamespace

import torch

from stable_rl.callbacks import HeldOutOutcomes
from stable_rl.rollout.batch import EvalBatch


def trainer(tmp_path, step: int, rank: int = 0):
    return SimpleNamespace(global_step=step, sanity_checking=False, log_dir=str(tmp_path), global_rank=rank)


def rows(path):
    return list(csv.reader(path.read_text().splitlines()))


def test_each_problems_correct_samples_are_appended_per_validation(tmp_path):
    callback = HeldOutOutcomes()
    batch = EvalBatch(torch.tensor([[1.0, 0, 1, 1], [0, 0, 0, 0]]), "heldout", problem_index=torch.tensor([5, 6]))
    other = EvalBatch(torch.tensor([[1.0, 1, 1, 1]]), "asdiv", problem_index=torch.tensor([0]))
    callback.on_validation_batch_end(trainer(tmp_path, 0), None, None, batch, 0)
    callback.on_validation_batch_end(trainer(tmp_path, 0), None, None, other, 0, 1)
    callback.on_validation_epoch_end(trainer(tmp_path, 0), None)
    callback.on_validation_batch_end(trainer(tmp_path, 25), None, None, batch, 0)
    callback.on_validation_epoch_end(trainer(tmp_path, 25), None)
    assert rows(tmp_path / "heldout_outcomes.csv") == [
        ["step", "eval_set", "problem", "correct", "samples"],
        ["0", "heldout", "5", "3", "4"],
        ["0", "heldout", "6", "0", "4"],
        ["0", "asdiv", "0", "4", "4"],
        ["25", "heldout", "5", "3", "4"],
        ["25", "heldout", "6", "0", "4"],
    ]


def test_another_process_writes_its_own_share(tmp_path):
    callback = HeldOutOutcomes()
    batch = EvalBatch(torch.tensor([[0.0, 1]]), "heldout", problem_index=torch.tensor([9]))
    callback.on_validation_batch_end(trainer(tmp_path, 3, rank=1), None, None, batch, 0)
    callback.on_validation_epoch_end(trainer(tmp_path, 3, rank=1), None)
    assert rows(tmp_path / "heldout_outcomes-rank1.csv")[1:] == [["3", "heldout", "9", "1", "2"]]
    assert not (tmp_path / "heldout_outcomes.csv").exists()
