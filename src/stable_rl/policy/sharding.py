"""FSDP2 (``torch.distributed.fsdp.fully_shard``) of the policy, under Lightning's ModelParallelStrategy.

Each decoder layer is one FSDP unit, gathered for its forward and backward and freed after; the
LightningModule is the root unit, holding the embeddings, final norm and LM head, so that calling the
module (its ``forward``: log-probs through the chunked head) gathers them. Gradients are reduce-scattered
after each backward and averaged over the processes, as DDP averages them.
"""

import torch
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from transformers import PreTrainedModel

from stable_rl.compat.transformers import no_split_module_classes


def is_sharded(module: torch.nn.Module) -> bool:
    return isinstance(module, FSDPModule)


def shard(
    root: torch.nn.Module, policy: PreTrainedModel, mesh: DeviceMesh, compute_dtype: torch.dtype | None = None
) -> None:
    """Shard ``policy``'s decoder layers (its ``_no_split_modules``) and then ``root``, which holds it, over
    the data-parallel dimension of ``mesh``; every process is a data-parallel one (no tensor parallelism).
    ``compute_dtype``: weights are gathered in it for each forward and backward, gradients reduced in
    float32 (FSDP2's mixed precision); None: in the weights' own dtype."""
    names = mesh.mesh_dim_names or ()
    if "tensor_parallel" in names and mesh["tensor_parallel"].size() > 1:
        raise ValueError(
            f"ModelParallelStrategy with tensor_parallel_size={mesh['tensor_parallel'].size()}: stable-rl shards "
            "the policy over data-parallel processes only (FSDP2). Use trainer.strategy: "
            "stable_rl.strategies.FSDP2Strategy, or ModelParallelStrategy with tensor_parallel_size: 1 and "
            "data_parallel_size: trainer.devices x trainer.num_nodes"
        )
    data = mesh["data_parallel"] if "data_parallel" in names else mesh
    layer_classes = no_split_module_classes(policy)
    layers = [module for module in policy.modules() if type(module).__name__ in layer_classes]
    if not layers:
        raise ValueError(
            f"{type(policy).__name__} names no decoder-layer class (_no_split_modules) to shard with FSDP2: "
            "use trainer.strategy: ddp"
        )
    precision = MixedPrecisionPolicy(compute_dtype, torch.float32) if compute_dtype else MixedPrecisionPolicy()
    for layer in layers:
        fully_shard(layer, mesh=data, mp_policy=precision)
    fully_shard(root, mesh=data, mp_policy=precision)
