"""A weight sync sends vLLM the checkpoint's layout: the policy's streamed weights, mapped one at a time,
are exactly the tensors under exactly the names its saved checkpoint holds."""

from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from stable_rl.rollout.checkpoint_layout import CheckpointLayout


def on_disk(path: str) -> dict[str, torch.Tensor]:
    weights: dict[str, torch.Tensor] = {}
    for file in Path(path).glob("*.safetensors"):
        weights.update(load_file(file))
    return weights


def mapped(path: str) -> tuple[dict[str, torch.Tensor], set[str]]:
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    streamed = list(model.state_dict().items())
    return dict(CheckpointLayout(path)(iter(streamed))), {name for name, _ in streamed}


def test_qwen3_moe_fused_experts_go_back_to_one_weight_per_expert_and_projection(tiny_model_path):
    out, live = mapped(tiny_model_path)
    disk = on_disk(tiny_model_path)
    assert "model.layers.0.mlp.experts.gate_up_proj" in live and "model.layers.0.mlp.experts.3.up_proj.weight" in disk
    assert out.keys() == disk.keys() and len(disk) == 135 and len(live) == 47
    assert all(torch.equal(out[name], disk[name]) for name in disk)


def test_mixtral_gets_its_block_sparse_moe_names_back(upcycled_smollm2_path):
    """The upcycled SmolLM2 (tied embeddings: the checkpoint has no lm_head, vLLM ties it itself)."""
    out, live = mapped(upcycled_smollm2_path)
    disk = on_disk(upcycled_smollm2_path)
    assert "model.layers.1.mlp.experts.down_proj" in live
    assert "model.layers.1.block_sparse_moe.experts.7.w2.weight" in disk
    assert out.keys() == disk.keys() | {"lm_head.weight"}
    assert all(torch.equal(out[name], disk[name]) for name in disk)
    assert torch.equal(out["lm_head.weight"], disk["model.embed_tokens.weight"])


def test_a_sync_derives_the_models_conversions_once_not_per_weight(tiny_model_path, monkeypatch):
    """transformers derives a model's conversions by walking all its modules: per weight, that is O(weights x
    modules) a sync (about a second for a 30B-A3B MoE's 531 weights)."""
    from transformers import conversion_mapping

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    layout = CheckpointLayout(tiny_model_path)
    derive = conversion_mapping.get_model_conversion_mapping
    calls = []
    monkeypatch.setattr(
        conversion_mapping, "get_model_conversion_mapping", lambda *a, **k: calls.append(1) or derive(*a, **k)
    )
    out = dict(layout(iter(model.state_dict().items())))
    assert len(out) == 135 and calls == []


def test_weights_split_at_load_time_are_joined_again_whole(tiny_dense_path, monkeypatch):
    """A checkpoint whose fused ``gate_up_proj`` transformers splits into ``gate_proj`` and ``up_proj`` when
    loading: its reverse needs both weights at once, so the layout holds the first until the second comes."""
    from transformers import conversion_mapping
    from transformers.core_model_loading import Chunk, WeightConverter

    def split_gate_up(*args, **kwargs):
        return [
            WeightConverter(
                source_patterns="mlp.gate_up_proj.weight",
                target_patterns=["mlp.gate_proj.weight", "mlp.up_proj.weight"],
                operations=[Chunk(dim=0)],
            )
        ]

    monkeypatch.setattr(conversion_mapping, "get_model_conversion_mapping", split_gate_up)
    model = AutoModelForCausalLM.from_pretrained(tiny_dense_path, dtype=torch.float32)
    live = model.state_dict()
    out = dict(CheckpointLayout(tiny_dense_path)(iter(live.items())))
    layers = model.config.num_hidden_layers
    assert not any(".gate_proj." in name or ".up_proj." in name for name in out)
    for i in range(layers):
        mlp = f"model.layers.{i}.mlp"
        fused = torch.cat([live[f"{mlp}.gate_proj.weight"], live[f"{mlp}.up_proj.weight"]])
        assert torch.equal(out[f"{mlp}.gate_up_proj.weight"], fused)
    assert len(out) == len(live) - layers
