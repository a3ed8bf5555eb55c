"""The base of every stable-rl LightningModule: an HF causal LM and its optimizer, from YAML."""

from collections.abc import Iterator
from dataclasses import asdict

import lightning as L
import torch
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
from torch.distributed.tensor import DTensor
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel

from stable_rl import StableRLWarning
from stable_rl.compat.lightning import attached_trainer
from stable_rl.dtypes import Dtype
from stable_rl.kernels import LIGER, compile_decoder_layers, register_liger_experts, use_liger_norms
from stable_rl.policy.finite import check_learning_rate
from stable_rl.policy.logprobs import sequence_logprobs
from stable_rl.policy.model_dir import check_model_dir
from stable_rl.policy.resume_settings import apply_to_live_optimizer, check_optimizer_class, configured_optimizer
from stable_rl.policy.runtime import ModelRuntime
from stable_rl.policy.sharding import is_sharded, shard
from stable_rl.rng import rng_states, set_rng_states

PACKING_ATTENTION = ("flex_attention", "flash_attention_2", "flash_attention_3", "flash_attention_4")


class HFPolicyModule(L.LightningModule):
    """Holds ``policy``, any HF causal LM (dense or MoE), loaded from ``model_path``; its ``forward`` gives
    the log-probs of given tokens. Under Lightning's ``ModelParallelStrategy`` the policy is sharded with
    FSDP2 (``stable_rl.policy.sharding``).

    Args:
        model_path: HF model directory (weights, config, tokenizer), e.g. ``data/tiny-qwen3-moe``.
        optimizer: optimizer factory, e.g. ``torch.optim.AdamW`` with its ``init_args``.
        lr_scheduler: optional scheduler factory, stepped after every optimizer update.
        dtype: training precision of the policy weights ("float32", "bfloat16").
        mixed_precision: FSDP2 only: the weights (and the optimizer's state) stay in ``dtype``, are gathered
            in this dtype for each forward and backward, and gradients are reduced in float32: ``dtype:
            float32`` with ``mixed_precision: bfloat16`` trains at bfloat16 speed without losing updates
            smaller than a bfloat16 weight's precision (AdamW at lr 1e-6 changes few bfloat16 weights at
            all).
        runtime: how the forward and backward run: kernels, compilation, padding, chunking, gradient
            checkpointing (``stable_rl.policy.runtime.ModelRuntime``); default: transformers' own, eager.
    """

    def __init__(
        self,
        model_path: str,
        optimizer: OptimizerCallable = torch.optim.AdamW,
        lr_scheduler: LRSchedulerCallable | None = None,
        dtype: Dtype = "float32",
        mixed_precision: Dtype | None = None,
        runtime: ModelRuntime = ModelRuntime(),
    ) -> None:
        super().__init__()
        self.model_path = model_path
        self.optimizer_factory = optimizer
        self.lr_scheduler_factory = lr_scheduler
        self.dtype_name = dtype
        self.mixed_precision = mixed_precision
        self.runtime = runtime
        if self.runtime.packed_sequences and self.runtime.attn_implementation not in PACKING_ATTENTION:
            rank_zero_warn(
                f"model.init_args.runtime.packed_sequences with attn_implementation={self.runtime.attn_implementation} "
                "(None: SDPA) attends over the whole pack: a [T, T] mask and attention of the micro-batch's T tokens, "
                "micro_batch_size times the padded batch's for rows of similar length; set "
                "model.init_args.runtime.attn_implementation: flex_attention or flash_attention_2",
                category=StableRLWarning,
            )
        self.policy: PreTrainedModel | None = None
        self._resumed = False  # set by on_load_checkpoint: on_train_start applies the configured optimizer settings

    def configure_model(self) -> None:
        sharded = self.device_mesh is not None  # ModelParallelStrategy: FSDP2
        if self.mixed_precision is not None and not sharded:
            raise ValueError(
                f"model.mixed_precision={self.mixed_precision} needs trainer.strategy "
                "stable_rl.strategies.FSDP2Strategy; with one device or DDP set model.dtype alone"
            )
        if self.policy is None:
            check_model_dir(self.model_path)  # before it loads (a hub name is looked up only now)
        if self.policy is None and sharded:
            self._load_sharded()
        elif self.policy is None:
            self.policy = self._prepared(self._pretrained(getattr(torch, self.dtype_name)))
        elif sharded and not is_sharded(self):
            shard(self, self.policy, self.device_mesh, self._compute_dtype())

    def _pretrained(self, dtype: torch.dtype) -> PreTrainedModel:
        return AutoModelForCausalLM.from_pretrained(self.model_path, dtype=dtype, **self._implementations())

    def _implementations(self) -> dict[str, str]:
        if self.runtime.experts_implementation == LIGER:
            register_liger_experts()
        return self.runtime.implementations()

    def _prepared(self, policy: PreTrainedModel) -> PreTrainedModel:
        if self.runtime.gradient_checkpointing:  # non-reentrant: the recompute runs inside the replay hooks too
            policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if self.runtime.kernels == LIGER:
            use_liger_norms(policy)
        if self.runtime.compile_layers:
            compile_decoder_layers(policy)
        return policy.train()  # from_pretrained returns eval mode; RL models use no dropout

    def _compute_dtype(self) -> torch.dtype | None:
        return getattr(torch, self.mixed_precision) if self.mixed_precision else None

    def _load_sharded(self) -> None:
        """FSDP2: rank 0 alone reads the checkpoint (one copy of the model in host memory, not one per
        process); every process builds the model on the meta device in ``dtype``, shards it, allocates its
        shards on its device and receives its part of each weight, and the buffers, from rank 0."""
        rank0 = self.trainer.global_rank == 0
        full = self._pretrained(getattr(torch, self.dtype_name)) if rank0 else None  # buffers computed in it too
        with torch.device("meta"):
            policy = AutoModelForCausalLM.from_config(
                AutoConfig.from_pretrained(self.model_path),
                dtype=getattr(torch, self.dtype_name),
                **self._implementations(),
            )
        self.policy = self._prepared(policy)
        shard(self, policy, self.device_mesh, self._compute_dtype())
        device = self.trainer.strategy.root_device
        self.to_empty(device=device)
        weights = full.state_dict() if rank0 else {}
        set_model_state_dict(policy, weights, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
        buffers = dict(full.named_buffers()) if rank0 else {}  # e.g. rotary frequencies, not in a state dict
        for name, buffer in policy.named_buffers():
            value = buffers[name].to(device, buffer.dtype) if rank0 else torch.empty_like(buffer)
            torch.distributed.broadcast(value, src=0)
            buffer.copy_(value)

    def configure_optimizers(self):
        optimizer = self.optimizer_factory(self.policy.parameters())
        check_learning_rate(optimizer)
        if self.lr_scheduler_factory is None:
            return optimizer
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": self.lr_scheduler_factory(optimizer), "interval": "step"},
        }

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["rng_states"] = rng_states()  # Lightning keeps none: a resumed run continues the streams
        if attached_trainer(self) is not None and self.trainer.optimizers:
            checkpoint["optimizer_class"] = type(self.trainer.optimizers[0]).__qualname__
        hyperparameters = checkpoint.get("hyper_parameters", {})
        if isinstance(hyperparameters.get("runtime"), ModelRuntime):  # a module built in code; the CLI's is a dict
            hyperparameters["runtime"] = asdict(hyperparameters["runtime"])  # plain values load with weights_only

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self._check_same_model(checkpoint)
        fitting = attached_trainer(self) is not None and self.trainer.state.fn == "fit"
        if "rng_states" in checkpoint and fitting:  # validating or testing a checkpoint leaves the RNG alone
            set_rng_states(checkpoint["rng_states"])
        if fitting:
            check_optimizer_class(checkpoint, configured_optimizer(self.optimizer_factory))
            self._resumed = True

    def on_train_start(self) -> None:
        """A resumed run trains with its own optimizer settings: every strategy has restored the checkpoint's
        optimizer and scheduler states by now (FSDP2's without passing them through ``on_load_checkpoint``)."""
        if self._resumed:
            self._resumed = False
            schedulers = [config.scheduler for config in self.trainer.lr_scheduler_configs]
            configured = configured_optimizer(self.optimizer_factory)
            changes = apply_to_live_optimizer(self.trainer.optimizers[0], schedulers, configured)
            if changes:
                rank_zero_warn(
                    f"resumed with this run's optimizer settings, not the checkpoint's: {', '.join(changes)}",
                    category=StableRLWarning,
                )

    def full_weights(self) -> Iterator[tuple[str, Tensor]]:
        """The policy's weights by HF name, whole, one at a time: a sharded (FSDP2) weight is gathered from
        all processes when it is reached, so no more than one gathered weight exists at a time. The gathers
        are collectives: every process must consume the whole stream, in order, at the same time."""
        for name, weight in self.policy.state_dict().items():
            yield name, weight.full_tensor() if isinstance(weight, DTensor) else weight

    def _check_same_model(self, checkpoint: dict) -> None:
        """Refuse a checkpoint of another architecture with its origin and the fix (Lightning's own
        error is a long list of missing keys and size mismatches). Sharded strategies load the weights
        themselves, before this hook, and leave no ``state_dict`` to compare."""
        if self.policy is None or "state_dict" not in checkpoint:
            return
        theirs = {k.removeprefix("policy."): tuple(v.shape) for k, v in checkpoint["state_dict"].items()}
        mine = {k: tuple(v.shape) for k, v in self.policy.state_dict().items()}
        differ = sorted({k for k in theirs.keys() | mine.keys() if theirs.get(k) != mine.get(k)})
        if differ:
            origin = checkpoint.get("hyper_parameters", {}).get("model_path", "an unknown model")
            examples = ", ".join(f"{k}: {theirs.get(k, 'absent')} vs {mine.get(k, 'absent')}" for k in differ[:3])
            raise ValueError(
                f"the checkpoint holds another model (trained from {origin}, this run's model_path is "
                f"{self.model_path}): {len(differ)} weights differ in name or shape (checkpoint vs this model), "
                f"e.g. {examples}. Resume with --model.init_args.model_path={origin}, or drop --ckpt_path to "
                "start a new run"
            )

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        response_mask: Tensor,
        temperature: float = 1.0,
        entropy: bool = True,
    ) -> tuple[Tensor, Tensor | None]:
        """Position-aligned log pi and entropy (None with ``entropy=False``), [M, L] each (see
        ``sequence_logprobs``). Call the module (``self(...)``), not this method: under FSDP2 the call
        gathers the unsharded weights (embeddings, final norm, LM head) around it."""
        runtime = self.runtime
        return sequence_logprobs(
            self.policy,
            input_ids,
            attention_mask,
            response_mask,
            temperature,
            chunk_size=runtime.logprob_chunk_size,
            entropy=entropy,
            compiled=input_ids.is_cuda if runtime.compile_logprobs is None else runtime.compile_logprobs,
            padding_mask=runtime.padding_mask,
            packed=runtime.packed_sequences,
            keep_head_grad=runtime.keep_head_grad,
        )
