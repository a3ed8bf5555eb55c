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
from transformers.core_model_loading import WeightConverter, revert_weight_conversion


class CheckpointLayout:
    """Maps streamed ``(name, tensor)`` weights of the model at ``model_path`` to its on-disk layout, one
    weight at a time (a fused tensor becomes its per-expert parts, views of it: nothing is copied). Weights
    that loading split from one tensor on disk (the reverse joins them) are held until all have come."""

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
        self.joins = [
            reverse
            for reverse in (c.reverse_transform() for c in conversions)
            if isinstance(reverse, WeightConverter) and len(reverse.source_patterns) > 1
        ]

    def __call__(self, named_tensors: Iterable[tuple[str, Tensor]]) -> Iterator[tuple[str, Tensor]]:
        if self.model._weight_conversions is None:  # a checkpoint loaded as it is on disk
            yield from named_tensors
            return
        waiting: dict[str, dict[str, Tensor]] = {}  # per on-disk name, the weights it joins that have come
        for name, tensor in named_tensors:
            join = self._join(name)
            if join is None:
                yield from revert_weight_conversion(self.model, {name: tensor}).items()
                continue
            target, parts = join
            group = waiting.setdefault(target, {})
            group[name] = tensor
            if len(group) == parts:
                yield from revert_weight_conversion(self.model, waiting.pop(target)).items()
        if waiting:
            missing = ", ".join(sorted(waiting))
            raise ValueError(f"the weight sync ended before all the weights of {missing} came: none was sent")

    def _join(self, name: str) -> tuple[str, int] | None:
        """The on-disk name that ``name`` is joined into with other weights, and how many they are."""
        for reverse in self.joins:
            target, pattern = reverse.rename_source_key(name)
            if pattern is not None:
                return target, len(reverse.source_patterns)
        return None
