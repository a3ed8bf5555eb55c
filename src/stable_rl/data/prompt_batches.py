"""Shuffled batches of training problems that a checkpoint can resume mid-epoch."""

import hashlib
from collections.abc import Iterator, Sequence
from typing import Generic, TypeVar

import torch

from stable_rl.batch_plan import BatchPlan

T = TypeVar("T")


class PromptBatches(Generic[T]):
    """``len(items) // batch_size`` batches per epoch in a new random order each epoch, the order
    Lightning drew from ``DataLoader(items, batch_size, shuffle=True, drop_last=True,
    generator=torch.Generator().manual_seed(seed))`` (it takes ``len`` batches per epoch).

    Resumable: Lightning stores ``state_dict()`` (epoch, batches consumed) in every checkpoint and
    hands it back through ``load_state_dict`` before iterating, and calls ``sampler.set_epoch`` at
    every epoch start, so a resumed run draws the same problems at the same step as a run that never
    stopped.

    Data-parallel: every process walks the same global batches of ``plan.prompts_per_step`` problems and
    yields the share of them its engine samples (``BatchPlan.engine_share``: its consecutive share of
    every mini-batch), so its k-th local mini-batch is its part of the k-th global one, as in a single
    process. Each problem's G responses stay on one engine, and a checkpoint resumes on any number of
    processes.

    Pipelined (``plan.max_staleness`` = k >= 1): each item is the window of k + 1 batches starting at that step's,
    concatenated (the later ones read on into the next epoch's order), so the data module can roll out a batch k
    steps before it is trained on; Lightning's count of batches and the resume state are those of k = 0.
    """

    def __init__(self, items: Sequence[T], plan: BatchPlan, seed: int, process: int = 0) -> None:
        self.items = items
        self.batch_size = plan.prompts_per_step
        self.seed = seed
        self.share = plan.engine_share(process)
        self.window = plan.max_staleness + 1
        self.epoch = 0
        self.consumed = 0  # batches of ``epoch`` already handed out
        self.lag = 0  # how many epochs Lightning's count is ahead of ``epoch`` (see ``set_epoch``)
        self.resumed = False  # a state was loaded and no epoch has started since
        self.sampler = self  # where Lightning looks for ``set_epoch``
        self._content: str | None = None  # digest of the items, made once (``_identity``)

    def set_epoch(self, epoch: int) -> None:
        """Lightning, at every epoch start: a new epoch starts from its first batch.

        Lightning counts an epoch that ``max_steps`` ended as complete, so a run resumed from the checkpoint
        written at that stop (e.g. ``last.ckpt``, to train on) starts Lightning's next epoch while this
        epoch's problems are not used up: they go on, as in a run that never stopped, and Lightning's count
        stays one ahead (``lag``). Only right after a resume: a run whose epochs Lightning cuts short
        (``limit_train_batches``) moves on to the next epoch."""
        epoch -= self.lag
        if self.resumed and epoch == self.epoch + 1 and 0 < self.consumed < len(self):
            self.lag += 1
        elif epoch != self.epoch:
            self.epoch, self.consumed = epoch, 0
        self.resumed = False

    def __len__(self) -> int:
        return len(self.items) // self.batch_size

    def order(self, epoch: int) -> list[int]:
        """The permutation of ``epoch``: each epoch DataLoader draws a base seed from the one generator,
        then RandomSampler a permutation (Lightning stops after ``len`` batches, before the sampler
        would draw its empty tail)."""
        generator = torch.Generator().manual_seed(self.seed)
        for _ in range(epoch + 1):
            torch.empty((), dtype=torch.int64).random_(generator=generator)
            order = torch.randperm(len(self.items), generator=generator)
        return order.tolist()

    def __iter__(self) -> Iterator[list[T]]:
        self.resumed = False
        if self.consumed >= len(self):  # the last epoch ended (or a checkpoint was saved at its end)
            self.epoch, self.consumed = self.epoch + 1, 0
        orders = {self.epoch: self.order(self.epoch)}  # and the next epoch's, once a window reaches into it
        while self.consumed < len(self):
            window = []
            for ahead in range(self.window):
                epoch, index = divmod(self.consumed + ahead, len(self))
                if self.epoch + epoch not in orders:
                    orders[self.epoch + epoch] = self.order(self.epoch + epoch)
                order = orders[self.epoch + epoch]
                batch = order[index * self.batch_size : (index + 1) * self.batch_size]
                window += [self.items[batch[i]] for i in self.share]
            self.consumed += 1
            yield window

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "consumed": self.consumed, "lag": self.lag, **self._identity()}

    def _identity(self) -> dict[str, int | str]:
        """The prompts' seed, size, batch size and content (a digest of every item, in order)."""
        if self._content is None:
            digest = hashlib.sha256()
            for item in self.items:
                digest.update(repr(item).encode())
            self._content = digest.hexdigest()[:16]
        return {"seed": self.seed, "size": len(self.items), "batch_size": self.batch_size, "content": self._content}

    def load_state_dict(self, state: dict) -> None:
        mine = self._identity()
        theirs = {k: state.get(k) for k in mine if k in state}  # a checkpoint from before "content" has none
        if theirs != {k: mine[k] for k in theirs}:
            raise ValueError(
                f"the checkpoint's training prompts ({theirs}) are not this run's ({mine}): resume with the "
                "data settings (prompts and their file's content, template, prompts_per_step, data.seed / "
                "seed_everything) the checkpoint was trained with"
            )
        self.epoch, self.consumed, self.lag = state["epoch"], state["consumed"], state.get("lag", 0)
        self.resumed = True
