"""PromptBatches: DataLoader's shuffled order, resumable from its state at any batch."""

import itertools

import pytest
import torch
from torch.utils.data import DataLoader

from stable_rl.batch_plan import BatchPlan
from stable_rl.data.prompt_batches import PromptBatches

ITEMS = list(range(10))  # 3 batches of 3 per epoch, one item dropped


def epochs(loader, n):
    """What Lightning takes: ``len(loader)`` batches per epoch, a new iterator each epoch."""
    return [list(itertools.islice(loader, len(loader))) for _ in range(n)]


@pytest.mark.parametrize("size", [9, 10])
def test_order_is_dataloaders_shuffle_epoch_after_epoch(size):
    items = ITEMS[:size]
    reference = DataLoader(items, 3, shuffle=True, drop_last=True, generator=torch.Generator().manual_seed(5))
    expected = [[b.tolist() for b in epoch] for epoch in epochs(reference, 3)]
    assert epochs(PromptBatches(items, BatchPlan(3, 2), seed=5), 3) == expected
    assert expected[0] != expected[1] and len(expected[0]) == 3


@pytest.mark.parametrize("stop", range(1, 7))  # mid-epoch, at an epoch's end, in the second epoch
def test_resumed_batches_continue_where_the_state_was_taken(stop):
    whole = list(itertools.chain.from_iterable(epochs(PromptBatches(ITEMS, BatchPlan(3, 2), seed=5), 3)))
    first = PromptBatches(ITEMS, BatchPlan(3, 2), seed=5)
    taken = []
    while len(taken) < stop:  # the way Lightning iterates: a new iter() each epoch
        taken += list(itertools.islice(iter(first), stop - len(taken)))
    resumed = PromptBatches(ITEMS, BatchPlan(3, 2), seed=5)
    resumed.load_state_dict(first.state_dict())
    rest = []
    while len(rest) < 9 - stop:
        rest += list(iter(resumed))
    assert taken + rest == whole


def test_a_state_from_other_prompts_is_refused():
    state = PromptBatches(ITEMS, BatchPlan(3, 2), seed=5).state_dict()
    with pytest.raises(ValueError, match=r"data.seed / seed_everything"):
        PromptBatches(ITEMS, BatchPlan(3, 2), seed=6).load_state_dict(state)
    with pytest.raises(ValueError, match="not this run's"):
        PromptBatches(ITEMS[:9], BatchPlan(3, 2), seed=5).load_state_dict(state)
    with pytest.raises(ValueError, match="prompts_per_step"):
        PromptBatches(ITEMS, BatchPlan(2, 2), seed=5).load_state_dict(state)


def test_a_state_from_other_prompts_of_the_same_size_is_refused():
    """Another prompt file of as many problems (or another template): the content differs."""
    state = PromptBatches(ITEMS, BatchPlan(3, 2), seed=5).state_dict()
    other = [item + 100 for item in ITEMS]
    refused = r"'content': '[0-9a-f]{16}'\}\) are not this run's .*\(prompts and their file's content"
    with pytest.raises(ValueError, match=refused):
        PromptBatches(other, BatchPlan(3, 2), seed=5).load_state_dict(state)
    del state["content"]  # a checkpoint from before the content was kept: its seed, size and batch size agree
    PromptBatches(other, BatchPlan(3, 2), seed=5).load_state_dict(state)


def test_set_epoch_starts_that_epoch_from_its_first_batch():
    """Lightning calls sampler.set_epoch at each epoch start, also after a resume that restored no state
    (an epoch-end checkpoint of an epoch-based run)."""
    whole = epochs(PromptBatches(ITEMS, BatchPlan(3, 2), seed=5), 3)
    fresh = PromptBatches(ITEMS, BatchPlan(3, 2), seed=5)
    assert fresh.sampler is fresh
    fresh.set_epoch(2)
    first = next(iter(fresh))
    fresh.set_epoch(2)  # the same epoch again (a mid-epoch resume): it goes on where it was
    assert [first, *fresh] == whole[2]


def test_a_resume_from_a_max_steps_stop_goes_on_with_the_unfinished_epoch():
    """A run stopped by max_steps after 2 of 3 batches: Lightning counts its epoch as complete and, resumed
    from that checkpoint, starts its epoch 1 with set_epoch(1); the third batch of epoch 0 still comes
    next, as in a run that never stopped, and later resumes keep Lightning's count one ahead."""
    whole = list(itertools.chain.from_iterable(epochs(PromptBatches(ITEMS, BatchPlan(3, 2), seed=5), 3)))
    stopped = PromptBatches(ITEMS, BatchPlan(3, 2), seed=5)
    taken = list(itertools.islice(iter(stopped), 2))
    resumed = PromptBatches(ITEMS, BatchPlan(3, 2), seed=5)
    resumed.load_state_dict(stopped.state_dict())
    for lightning_epoch in (1, 2):
        resumed.set_epoch(lightning_epoch)
        taken += list(iter(resumed))
    resumed.set_epoch(3)
    taken.append(next(iter(resumed)))
    again = PromptBatches(ITEMS, BatchPlan(3, 2), seed=5)
    again.load_state_dict(resumed.state_dict())  # stopped after 1 batch of epoch 2, Lightning in its epoch 3
    again.set_epoch(3)
    assert taken + list(iter(again)) == whole
    assert again.lag == 1


def test_epochs_lightning_cuts_short_move_on_to_the_next_epoch():
    """limit_train_batches=2 of 3 batches, no resume: Lightning starts each epoch after 2 batches, and
    each epoch starts from its own first batch (the lag is for resumes only)."""
    whole = epochs(PromptBatches(ITEMS, BatchPlan(3, 2), seed=5), 3)
    cut = PromptBatches(ITEMS, BatchPlan(3, 2), seed=5)
    taken = []
    for epoch in range(3):
        cut.set_epoch(epoch)
        taken.append(list(itertools.islice(iter(cut), 2)))
    assert taken == [batches[:2] for batches in whole] and cut.lag == 0


def test_processes_take_consecutive_shares_of_every_global_batch():
    whole = epochs(PromptBatches(ITEMS, BatchPlan(4, 2), seed=5), 2)
    shares = [epochs(PromptBatches(ITEMS, BatchPlan(4, 2, processes=2), seed=5, process=r), 2) for r in (0, 1)]
    merged = [[a + b for a, b in zip(ea, eb, strict=True)] for ea, eb in zip(*shares, strict=True)]
    assert merged == whole and len(whole[0]) == 2  # 2 epochs of 2 batches of 4 (2 per process)


def test_a_batch_the_processes_cannot_share_names_the_fix():
    with pytest.raises(
        ValueError, match=r"prompts_per_step=3 cannot be shared by 2 processes .* choose a multiple of 2"
    ):
        PromptBatches(ITEMS, BatchPlan(3, 2, processes=2), seed=5, process=0)


def test_with_mini_batches_each_process_takes_its_part_of_every_one():
    """N = 2 mini-batches of 4 prompts, 2 processes: process r holds prompts 2r, 2r+1 of each
    mini-batch, so its k-th local mini-batch is its half of the k-th global one."""
    (whole,) = epochs(PromptBatches(ITEMS, BatchPlan(8, 2), seed=5), 1)[0]
    two = BatchPlan(8, 2, mini_batch_size=8, processes=2)  # N = 2 updates of 4 prompts x 2 responses
    shares = [epochs(PromptBatches(ITEMS, two, seed=5, process=r), 1)[0][0] for r in (0, 1)]
    assert shares == [[whole[i] for i in (0, 1, 4, 5)], [whole[i] for i in (2, 3, 6, 7)]]
    with pytest.raises(ValueError, match=r"choose a multiple of 4 \(processes x mini-batches\)"):
        PromptBatches(ITEMS, BatchPlan(6, 2, processes=4), seed=5, process=0)  # at N = 2, whole groups fail first


def test_a_pipelined_run_gets_each_batch_with_the_next_one_across_epochs():
    """max_staleness = 1: item t is batch t followed by batch t + 1, the last of an epoch by the next epoch's
    first, while Lightning still counts 3 batches an epoch."""
    plain = list(itertools.chain.from_iterable(epochs(PromptBatches(ITEMS, BatchPlan(3, 2), seed=5), 3)))
    windows = list(itertools.chain.from_iterable(epochs(PromptBatches(ITEMS, BatchPlan(3, 2, max_staleness=1), 5), 2)))
    assert windows == [plain[t] + plain[t + 1] for t in range(6)]
