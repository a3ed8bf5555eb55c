"""Each evaluation problem's outcome at every validation, so that two runs evaluated on the same problems are
compared pairwise (a paired test on per-problem accuracy), not by two independent margins.

Writes ``heldout_outcomes.csv`` in the run's log folder (``heldout_outcomes-rank<r>.csv`` for the other processes of
a data-parallel run, each holding its share of the problems): one row per validation step, evaluation set and
problem, with the number of its n samples the verifier scored correct. A resumed run appends to it.
"""

import csv
from pathlib import Path

import lightning as L

from stable_rl.rollout.batch import EvalBatch

FIELDS = ("step", "eval_set", "problem", "correct", "samples")


class HeldOutOutcomes(L.Callback):
    """Log every evaluation problem's number of correct samples per validation (``heldout_outcomes.csv``)."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, str, int, int, int]] = []

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        if not isinstance(batch, EvalBatch) or batch.problem_index is None or trainer.sanity_checking:
            return
        correct = batch.rewards.sum(-1).round().long().tolist()  # [P]
        samples = batch.rewards.shape[-1]
        for problem, count in zip(batch.problem_index.tolist(), correct, strict=True):
            self.rows.append((trainer.global_step, batch.eval_set, problem, count, samples))

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        log_dir = Path(trainer.log_dir or trainer.default_root_dir)  # a collective under DDP: every rank asks
        if not self.rows:
            return
        rank = trainer.global_rank
        path = log_dir / ("heldout_outcomes.csv" if rank == 0 else f"heldout_outcomes-rank{rank}.csv")
        path.parent.mkdir(parents=True, exist_ok=True)
        new = not path.exists()
        with open(path, "a", newline="") as file:
            writer = csv.writer(file)
            if new:
                writer.writerow(FIELDS)
            writer.writerows(self.rows)
        self.rows = []
