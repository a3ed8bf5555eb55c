"""RolloutDataModule seeds: by default the run's seed_everything, for the prompt order and the engine."""

from types import SimpleNamespace

import lightning as L
import pytest

from stable_rl.batch_plan import BatchPlan
from stable_rl.data import ReasoningGymPrompts
from stable_rl.rl import RolloutDataModule
from stable_rl.rollout import HFEngine, VLLMEngine


def trainer(rank: int = 0, world: int = 1, devices: int | None = None) -> SimpleNamespace:
    """What the data module reads of Lightning's trainer."""
    devices = world if devices is None else devices
    return SimpleNamespace(global_rank=rank, local_rank=rank % devices, world_size=world, num_devices=devices)


def data_module(tiny_model_path, **kwargs) -> RolloutDataModule:
    kwargs.setdefault("prompts_per_step", 2)
    data = RolloutDataModule(ReasoningGymPrompts(["chain_sum"], size=8, seed=3), model_path=tiny_model_path, **kwargs)
    data.trainer = trainer()
    return data


def test_seeds_default_to_the_runs_seed(tiny_model_path):
    L.seed_everything(7, verbose=False)
    data = data_module(tiny_model_path, engine=HFEngine())
    data.setup("fit")
    assert (data.seed, data.engine.seed) == (7, 7)
    first = [p.prompt_ids for p in next(iter(data.train_dataloader()))]
    L.seed_everything(8, verbose=False)
    other = data_module(tiny_model_path, engine=HFEngine())
    other.setup("fit")
    assert other.engine.seed == 8 and [p.prompt_ids for p in next(iter(other.train_dataloader()))] != first


def test_explicit_seeds_are_kept(tiny_model_path):
    L.seed_everything(7, verbose=False)
    data = data_module(tiny_model_path, engine=HFEngine(seed=3), seed=5)
    data.setup("fit")
    assert (data.seed, data.engine.seed) == (5, 3)


def test_greedy_training_rollouts_are_refused():
    with pytest.raises(ValueError, match=r"training rollouts need temperature > 0 .* data.eval_sampling"):
        RolloutDataModule(ReasoningGymPrompts(["chain_sum"], size=8, seed=3), engine=HFEngine(temperature=0.0))


def test_a_benchmark_made_only_of_training_questions_is_refused(tiny_model_path):
    same = ReasoningGymPrompts(["chain_sum"], size=8, seed=3)
    data = data_module(tiny_model_path, engine=HFEngine(), eval_sets={"heldout": same})
    with pytest.raises(ValueError, match="evaluation set 'heldout' has no problems left after removing training"):
        data.setup("fit")


def test_a_group_of_one_is_refused_when_configured():
    with pytest.raises(ValueError, match=r"group_size=1: the group baseline needs data.group_size >= 2"):
        RolloutDataModule(ReasoningGymPrompts(["chain_sum"], size=8, seed=3), engine=HFEngine(), group_size=1)


def test_fewer_problems_than_a_step_needs_is_refused(tiny_model_path):
    data = RolloutDataModule(
        ReasoningGymPrompts(["chain_sum"], size=3, seed=3),
        engine=HFEngine(),
        prompts_per_step=4,
        model_path=tiny_model_path,
    )
    data.trainer = trainer()
    with pytest.raises(
        ValueError, match=r"3 problems is fewer than data.prompts_per_step=4: .* lower prompts_per_step"
    ):
        data.setup("fit")


def test_each_process_rolls_out_its_share_from_its_own_seed_stream(tiny_model_path):
    L.seed_everything(7, verbose=False)
    whole = data_module(tiny_model_path, engine=HFEngine())
    whole.setup("fit")
    expected = [p.prompt_ids for p in next(iter(whole.train_dataloader()))]
    shares, seeds = [], []
    for rank in (0, 1):
        data = data_module(tiny_model_path, engine=HFEngine())
        data.trainer = trainer(rank=rank, world=2)
        data.setup("fit")
        shares += [p.prompt_ids for p in next(iter(data.train_dataloader()))]
        seeds.append(data.engine.base_seed)
    assert shares == expected and len(expected) == whole.prompts_per_step
    assert seeds == [7, 7 + 7919]


def test_a_seed_set_by_hand_still_differs_between_processes(tiny_model_path):
    seeds = []
    for rank in (0, 1):
        data = data_module(tiny_model_path, engine=HFEngine(seed=3))
        data.trainer = trainer(rank=rank, world=2)
        data.setup("fit")
        seeds.append((data.engine.seed, data.engine.base_seed, data.engine.request_seed(5, 0, 8)))
    assert seeds[0][:2] == (3, 3) and seeds[1][:2] == (3, 3 + 7919) and seeds[0][2] != seeds[1][2]


def test_a_mini_batch_the_processes_cannot_share_in_whole_groups_names_the_fix(tiny_model_path):
    data = data_module(tiny_model_path, engine=HFEngine(), group_size=4, mini_batch_size=4)  # one group per update
    data.trainer = trainer(world=2)
    with pytest.raises(
        ValueError, match=r"mini_batch_size=4 responses cannot be shared by 2 processes .* multiple of 8"
    ):
        data.setup("fit")  # the batch plan is validated once, before any dataloader
        data.train_dataloader()


def test_processes_sharing_a_tensor_parallel_engine_keep_their_own_share_of_its_rollout(tiny_model_path):
    """4 processes, vLLM engines of tensor_parallel_size 2 (processes 0-1 share one, 2-3 the other), N = 2
    mini-batches: an engine samples its pair's problems with one seed stream, and each process keeps
    the problems (and their G samples) it would have drawn with an engine of its own."""
    kept, expected, seeds = [], [], []
    for rank in range(4):
        for engine in (VLLMEngine(tensor_parallel_size=2), HFEngine()):
            # mini-batches of 4 prompts x 2 responses
            data = data_module(tiny_model_path, engine=engine, group_size=2, prompts_per_step=8, mini_batch_size=8)
            data.trainer = trainer(rank=rank, world=4)
            data.setup("fit")
            problems = next(iter(data.train_dataloader()))
            if isinstance(engine, HFEngine):
                expected.append([p.prompt_ids for p in problems])
                continue
            seeds.append(engine.base_seed)
            assert len(problems) == 4  # the pair's share: 2 of each mini-batch's 4 prompts
            samples = [f"{i}.{j}" for i in range(4) for j in range(2)]  # 2 samples per problem
            own, own_samples = data._own_part(problems, samples)
            kept.append([p.prompt_ids for p in own])
            member = rank % 2
            assert own_samples == [f"{i}.{j}" for i in (member, 2 + member) for j in range(2)]
    assert kept == expected
    assert seeds[0] == seeds[1] != seeds[2] == seeds[3]


def test_processes_that_cannot_share_tensor_parallel_engines_are_refused():
    with pytest.raises(ValueError, match=r"3 data-parallel processes cannot share engines of tensor_parallel_size=2"):
        VLLMEngine(tensor_parallel_size=2).place(BatchPlan(6, 2, processes=3, tensor_parallel_size=2), 0, 0)


def test_prompts_that_processes_sharing_an_engine_cannot_split_are_refused(tiny_model_path):
    """6 prompts for 4 processes, engines of 2: each engine's 3 prompts cannot be split in two."""
    data = data_module(tiny_model_path, engine=VLLMEngine(tensor_parallel_size=2), prompts_per_step=6)
    data.trainer = trainer(world=4)
    with pytest.raises(ValueError, match=r"prompts_per_step=6 cannot be shared by 4 processes .* multiple of 4"):
        data.setup("fit")  # the batch plan is validated once, before any dataloader
        data.train_dataloader()


def test_an_engine_group_that_would_span_two_nodes_is_refused(tiny_model_path):
    data = data_module(tiny_model_path, engine=VLLMEngine(tensor_parallel_size=2))
    data.trainer = trainer(world=3 * 2, devices=3)
    with pytest.raises(ValueError, match=r"would span two nodes of trainer.devices=3: choose a divisor"):
        data.setup("fit")


def test_each_evaluation_batch_draws_from_its_problems_own_seeds(tiny_model_path, monkeypatch):
    """An evaluation in batches of 3 problems: each batch's first problem's position in the set reaches the
    engine (its samples' seeds), so no two batches of one validation draw alike (one seed per call would tie
    the k-th problems of every batch together, which the held-out margin's independence does not allow)."""
    heldout = ReasoningGymPrompts(["chain_sum"], size=7, seed=1000)
    data = data_module(tiny_model_path, engine=HFEngine(), eval_sets={"heldout": heldout}, eval_prompts_per_batch=3)
    data.setup("fit")
    problems = data.eval_problems["heldout"]
    assert [p.index for p in problems] == list(range(7))
    calls = []
    monkeypatch.setattr(data, "_sync", lambda: 4)
    monkeypatch.setattr(
        data.engine,
        "generate",
        lambda ids, group_size, step, sampling, first_index: (
            calls.append((len(ids), step, first_index))
            or [SimpleNamespace(response_ids=[]) for _ in range(len(ids) * group_size)]
        ),
    )
    for batch in data.val_dataloader()[0]:
        data.evaluate(batch, "heldout")
    assert calls == [(3, 4, 0), (3, 4, 3), (1, 4, 6)]
