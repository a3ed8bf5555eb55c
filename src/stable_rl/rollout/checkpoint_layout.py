"""The policy's weights in the layout of its checkpoint on disk, the layout vLLM's model loaders read.

transformers 5 converts some checkpoints while loading them: Mixtral's
``block_sparse_moe.experts.<e>.w1/w3`` become one fused ``mlp.experts.gate_up_proj``, Qwen2/3-MoE's
per-expert ``gate_proj``/``up_proj`` likewise. The policy streams its weights under those in-memory names;
a weight sync into vLLM sends the layout on disk instead: the reverse of the load-time conversion, which is
what ``save_pretrained`` writes (``transformers.core_model_loading.revert_weight_conversion``)."""

from collections.abc import Iterable, Iterator

import torch
from torch import Tensor
from transformers import AutoConfig, AutoModelForCausalLM, conversion_mapping, core_model_loading
from transformers.core_model_loading import revert_weight_conversion


class CheckpointLayout:
    """Maps streamed ``(name, tensor)`` weights of the model at ``model_path`` to its on-disk layout, one
    weight at a time (a fused tensor becomes its per-expert parts, views of it: nothing is copied)."""

    def __init__(self, model_path: str) -> None:
        config = AutoConfig.from_pretrained(model_path)
        with torch.device("meta"):  # only the model's conversion rules are needed, not its weights
            self.model = AutoModelForCausalLM.from_config(config)
        # What revert_weight_conversion derives for a model that from_pretrained did not load (no prefix
        # changes), derived once: it would otherwise walk all the model's modules again for every weight.
        prefix_change = getattr(core_model_loading, "PrefixChange", ())
        conversions = conversion_mapping.get_model_conversion_mapping(self.model, add_legacy=False)
        conversions = [c for c in conversions if not isinstance(c, prefix_change)]
        self.model._weight_conversions = conversions or None

    def __call__(self, named_tensors: Iterable[tuple[str, Tensor]]) -> Iterator[tuple[str, Tensor]]:
        if self.model._weight_conversions is None:  # a checkpoint loaded as it is on disk
            yield from named_tensors
            return
        for name, tensor in named_tensors:
            yield from revert_weight_conversion(self.model, {name: tensor}).items()
