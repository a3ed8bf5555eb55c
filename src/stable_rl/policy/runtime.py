"""ModelRuntime: how the policy's forward and backward run (kernels, compilation, padding, chunking, memory),
one typed group of settings under ``model.init_args.runtime``.

None of them changes what is computed beyond float rounding; they trade speed against memory, and each is
checked against the plain run by a test (tests/unit/test_kernels.py, test_packing.py, test_routing_replay.py).
"""

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class ModelRuntime:
    """The policy's runtime switches, e.g. in YAML::

        model:
          init_args:
            runtime:
              experts_implementation: grouped_mm
              compile_logprobs: false

    Args:
        experts_implementation: transformers' MoE experts kernel, e.g. "grouped_mm" (one grouped GEMM per
            layer: ~3x the update throughput of "eager" on an H100) or "eager"; "liger": Liger-Kernel's fused
            MoE (Triton, CUDA, bfloat16/float16 weights; ``stable_rl.kernels.liger``); None = transformers'
            default.
        attn_implementation: transformers' attention kernel ("sdpa", "flash_attention_2", ...); None = default.
        kernels: "liger": every RMSNorm runs as Liger-Kernel's fused Triton RMSNorm (CUDA); None: the model's own.
        compile_layers: ``torch.compile`` each decoder layer's attention, norms and experts in place, the
            MoE routers left eager for Routing Replay's hooks (``stable_rl.kernels.compile``).
        compile_logprobs: the log-prob head's softmax arithmetic of each chunk runs as compiled kernels
            (one read of the float32 logits instead of one per operation; ``stable_rl.policy.logprobs``). None: on
            GPUs (the training phase 6.43 -> 5.30 s a step between two GPU TRL comparisons, benchmarks/RESULTS.md),
            off on CPU.
        padding_mask: False: the decoder runs without the padding mask, under its causal mask alone, which
            is exact for right-padded rows (as every stable-rl batch is) and lets SDPA use FlashAttention.
        packed_sequences: every forward runs on the real tokens of its rows alone, packed into one row whose
            positions restart at each sequence (``stable_rl.policy.packing``): no padding position is computed,
            the log-probs are the padded batch's. Pair it with ``attn_implementation: flex_attention`` or
            ``flash_attention_2``, which skip attention across sequences; SDPA and eager compute the whole
            pack's square under a block-diagonal mask.
        logprob_chunk_size: tokens per chunk of the vocabulary head (bounds float32 logits memory).
        keep_head_grad: the head's forward keeps d log p / d logits of each response token ([tokens, vocab]
            in the model's dtype, per micro-batch until its backward) so the backward does not recompute the
            logits: one of the head's three matmuls less, for memory (``stable_rl.policy.logprobs``).
        gradient_checkpointing: keep only each decoder layer's input for the backward and recompute the
            rest there (long responses: activations of every layer would not fit); Routing Replay replays
            the same routes in the recompute.
    """

    experts_implementation: str | None = None
    attn_implementation: str | None = None
    kernels: Literal["liger"] | None = None
    compile_layers: bool = False
    compile_logprobs: bool | None = None
    padding_mask: bool = True
    packed_sequences: bool = False
    logprob_chunk_size: int = 1024
    keep_head_grad: bool = False
    gradient_checkpointing: bool = False

    def implementations(self) -> dict[str, str]:
        """The transformers kernels chosen, as ``from_pretrained``'s keyword arguments."""
        chosen = {
            "experts_implementation": self.experts_implementation,
            "attn_implementation": self.attn_implementation,
        }
        return {name: value for name, value in chosen.items() if value is not None}
