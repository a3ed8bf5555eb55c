"""RolloutDataModule seeds: by default the run's seed_everything, for the prompt order and the engine."""

from types import SimpleNamespace

import lightning as L

from stable_rl.data import ReasoningGymPrompts, RolloutDataModule
from stable_rl.rollout import HFEngine


def data_module(tiny_model_path, **kwargs) -> RolloutDataModule:
    data = RolloutDataModule(ReasoningGymPrompts(["chain_sum"], size=8, seed=3), prompts_per_step=2, **kwargs)
    data.trainer = SimpleNamespace(lightning_module=SimpleNamespace(model_path=tiny_model_path))
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
