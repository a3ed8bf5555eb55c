"""FSDP2 pieces that need no process group: what is refused, whole weights for the engine, checkpoint
directories swapped in whole. (Sharded training itself: tests/integration/test_data_parallel.py.)"""

from types import SimpleNamespace

import pytest
import torch

from stable_rl.checkpoint_io import _exchange, replace_directory
from stable_rl.policy.sharding import shard
from stable_rl.rl import PolicyModule
from stable_rl.rollout import HFEngine


class Mesh(SimpleNamespace):
    """A DeviceMesh's names and sizes."""

    def __getitem__(self, name: str):
        return SimpleNamespace(size=lambda: self.sizes[name])


def test_tensor_parallel_policy_is_refused_with_the_fix(tiny_model):
    mesh = Mesh(mesh_dim_names=("data_parallel", "tensor_parallel"), sizes={"data_parallel": 1, "tensor_parallel": 2})
    with pytest.raises(ValueError, match=r"tensor_parallel_size=2: .* stable_rl.strategies.FSDP2Strategy"):
        shard(torch.nn.Module(), tiny_model, mesh)


def test_a_model_without_decoder_layer_classes_is_refused(tiny_model, monkeypatch):
    monkeypatch.setattr(tiny_model, "_no_split_modules", None)
    mesh = Mesh(mesh_dim_names=("data_parallel", "tensor_parallel"), sizes={"data_parallel": 2, "tensor_parallel": 1})
    with pytest.raises(ValueError, match=r"no decoder-layer class .* use trainer.strategy: ddp"):
        shard(torch.nn.Module(), tiny_model, mesh)


def test_full_weights_stream_the_policys_state_and_the_hf_engine_takes_them(tiny_model_path):
    module = PolicyModule(tiny_model_path)
    module.configure_model()
    with torch.no_grad():
        for weight in module.policy.parameters():
            weight.add_(0.25)
    assert len(module.policy.state_dict()) == 47
    stream = module.full_weights()
    assert next(stream)[0] == next(iter(module.policy.state_dict()))  # lazy: one weight at a time
    engine = HFEngine()
    engine.start(tiny_model_path, 64)
    engine.load_weights(module.full_weights())
    for name, weight in module.policy.state_dict().items():
        assert torch.equal(engine.model.state_dict()[name], weight), name
    with pytest.raises(KeyError, match=r"46 of the engine's weights were not synced"):
        engine.load_weights(list(module.full_weights())[:1])
    with pytest.raises(KeyError, match=r"'lm_head.bias' is not in the engine's model"):
        engine.load_weights([("lm_head.bias", torch.zeros(1))])


@pytest.mark.parametrize("swap", [True, False], ids=["renameat2", "two-renames"])
@pytest.mark.parametrize("old", ["directory", "file", None])
def test_a_staged_checkpoint_directory_replaces_the_old_checkpoint(tmp_path, old, swap, monkeypatch):
    if not swap:  # a filesystem without RENAME_EXCHANGE
        monkeypatch.setattr("stable_rl.checkpoint_io._exchange", lambda a, b: False)
    target, staging = tmp_path / "last.ckpt", tmp_path / ".last.ckpt.partial"
    staging.mkdir()
    (staging / "meta.pt").write_text("new")
    if old == "directory":
        target.mkdir()
        (target / "meta.pt").write_text("old")
    elif old == "file":
        target.write_text("old")
    replace_directory(staging, target)
    assert (target / "meta.pt").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]


def test_exchange_swaps_two_directories_in_one_step(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x").write_text("a")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x").write_text("b")
    assert _exchange(tmp_path / "a", tmp_path / "b")  # Linux with glibc >= 2.28 on a local filesystem
    assert (tmp_path / "a" / "x").read_text() == "b" and (tmp_path / "b" / "x").read_text() == "a"


def test_mixed_precision_without_fsdp2_is_refused_with_the_fix(tiny_model_path):
    module = PolicyModule(tiny_model_path, mixed_precision="bfloat16")
    with pytest.raises(ValueError, match=r"mixed_precision=bfloat16 needs trainer.strategy .*FSDP2Strategy"):
        module.configure_model()
