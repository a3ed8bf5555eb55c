"""BatchPlan: the one place the geometry of a global step is derived and checked."""

import pytest

from stable_rl.batch_plan import BatchPlan


def test_n_and_each_process_share_are_derived_once():
    """16 prompts x 8 responses, updates of 64 over 4 processes, forwards of 8: N = 2, 16 rows of each
    mini-batch per process in 2 forwards; every process takes 2 prompts of each mini-batch of 8."""
    plan = BatchPlan(16, 8, mini_batch_size=64, micro_batch_size=8, processes=4)
    assert (plan.global_batch_size, plan.updates, plan.mini_rows, plan.micro_rows) == (128, 2, 16, 8)
    assert (plan.engines, plan.processes_per_engine) == (4, 1)
    assert plan.engine_share(1) == [2, 3, 10, 11]
    assert sorted(i for p in range(4) for i in plan.engine_share(p)) == list(range(16))


def test_processes_sharing_an_engine_keep_their_part_of_its_prompts():
    """4 processes, engines of 2: engine 1 (processes 2, 3) samples 4 prompts of each mini-batch of 8 and
    each of its processes keeps the 2 it would have drawn alone."""
    plan = BatchPlan(16, 2, mini_batch_size=16, processes=4, tensor_parallel_size=2, devices_per_node=4)
    assert (plan.engines, plan.processes_per_engine, plan.engine_rank(3)) == (2, 2, 1)
    engine = plan.engine_share(2)
    assert engine == [4, 5, 6, 7, 12, 13, 14, 15]
    alone = BatchPlan(16, 2, mini_batch_size=16, processes=4)
    for process in (2, 3):
        assert [engine[i] for i in plan.own_share(process)] == alone.engine_share(process)


def test_one_process_is_its_own_engine_and_takes_every_prompt():
    plan = BatchPlan(2, 4, mini_batch_size=2, tensor_parallel_size=2)
    assert (plan.updates, plan.mini_rows, plan.micro_rows, plan.processes_per_engine) == (4, 2, 2, 1)
    assert plan.engine_share(0) == [0, 1] and plan.own_share(0) == [0, 1]


def test_a_global_batch_the_processes_cannot_share_names_the_fix():
    with pytest.raises(ValueError, match=r"global batch of 9 responses cannot be shared by 2 processes: choose data"):
        BatchPlan(3, 3, processes=2)
