"""PolicyModule: the token-level surrogate objective trained on rollouts (paper Sec. 2-3).

Each ``training_step`` receives one global batch of rollouts (P prompts x G responses) and
1. recomputes log pi_old with the training engine, without gradients (paper: pi_old != mu_old), for
   mini-batches 2..N; the first mini-batch's update forward gives it for its rows (same weights, same
   routes), so on-policy training (N = 1) has no separate pass;
2. splits the batch into N = global batch / ``data.mini_batch_size`` mini-batches (the batch's ``BatchPlan``) and makes one
   optimizer update per mini-batch (N = 1 is on-policy; N > 1 the paper's off-policy setting),
   each summed over micro-batches and divided by one constant for the whole mini-batch;
3. logs reward, training-inference KL, entropy, IS and clipping statistics, and the seconds of
   each phase (``time/``: sync, rollout, reward, pi_old, update, overhead, step).
Validation receives verified samples of each evaluation set and logs avg@n (the paper's metric) and
the unbiased pass@k for k = 1, 2, 4, ... <= n.
Optimisation is manual (several optimizer steps per batch), so ``trainer.global_step`` counts
optimizer updates; the rollout engine is synced to every new step before it samples.
"""

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, nullcontext

import torch
from lightning.fabric.utilities import move_data_to_device
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from lightning.pytorch.strategies import DeepSpeedStrategy, FSDPStrategy
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor
from torch.distributed.tensor import DTensor
from torchmetrics.aggregation import SumMetric

from stable_rl import StableRLWarning
from stable_rl.batch_plan import BatchPlan
from stable_rl.callbacks.policy_forward import Phase, PolicyForwardCallback
from stable_rl.checkpoint_io import check_writable
from stable_rl.compat.lightning import attached_trainer, count_skipped_optimizer_step
from stable_rl.dtypes import Dtype
from stable_rl.metrics import AvgAtK, PassAtK, ProblemCount, StepMetrics, token_kl
from stable_rl.objectives import LossInputs, MiniRL, Objective
from stable_rl.policy.finite import first_nonfinite
from stable_rl.policy.module import HFPolicyModule
from stable_rl.policy.resume_settings import describe
from stable_rl.policy.runtime import ModelRuntime
from stable_rl.policy.snapshot import WeightSnapshot
from stable_rl.rl.health import PARTS, gradient_share, health_metrics, sequence_train_infer_gap
from stable_rl.rollout import EvalBatch, RolloutBatch
from stable_rl.timing import timed

PROGRESS_BAR = ("reward", "kl", "entropy")
UNSUPPORTED_STRATEGIES = (FSDPStrategy, DeepSpeedStrategy)  # FSDP2 runs through ModelParallelStrategy


def _check_limits(max_grad_norm: float | None, max_nonfinite_updates: int) -> None:
    """Refuse limits that would silently mean something else (a non-positive clip as "no clipping", a
    non-positive count as "stop at once")."""
    if max_grad_norm is not None and not max_grad_norm > 0:
        raise ValueError(f"model.init_args.max_grad_norm={max_grad_norm} must be > 0, or null for no clipping")
    if max_nonfinite_updates < 1:
        raise ValueError(
            f"model.init_args.max_nonfinite_updates={max_nonfinite_updates} must be at least 1 (the non-finite "
            "updates in a row that stop a run)"
        )


class PolicyModule(HFPolicyModule):
    """Trains any HF causal LM (dense or MoE) with a policy-gradient ``objective``.

    Args:
        model_path: HF model directory (weights, config, tokenizer), e.g. ``data/tiny-qwen3-moe``.
        objective: the loss, e.g. ``stable_rl.objectives.MiniRL`` (default) or ``GRPO``/``CISPO``.
        optimizer: optimizer factory, e.g. ``torch.optim.AdamW`` with its ``init_args``.
        lr_scheduler: optional scheduler factory, stepped after every optimizer update.
        max_grad_norm: clip the global gradient norm to this before each update; None = no clipping.
        dtype: training precision of the policy weights ("float32", "bfloat16").
        mixed_precision: see ``HFPolicyModule``.
        runtime: kernels, compilation, padding, chunking, gradient checkpointing
            (``stable_rl.policy.runtime.ModelRuntime``).
        health_threshold: ``train/health/beyond_threshold`` is the fraction of response tokens whose
            |log(pi_theta/mu_old)| exceeds this (``stable_rl.rl.health``).
        max_nonfinite_updates: an update whose loss or gradient is NaN/inf is skipped (no weight or
            optimizer change, counted in ``train/skipped_updates``; the step counter still advances, so
            schedules stay aligned); this many in a row stop the run at the end of the global step with
            a checkpoint of the last good state (``nonfinite-step=<n>.ckpt``).
    """

    def __init__(
        self,
        model_path: str,
        objective: Objective | None = None,
        optimizer: OptimizerCallable = torch.optim.AdamW,
        lr_scheduler: LRSchedulerCallable | None = None,
        max_grad_norm: float | None = 1.0,
        dtype: Dtype = "float32",
        mixed_precision: Dtype | None = None,
        runtime: ModelRuntime = ModelRuntime(),
        health_threshold: float = 0.2,
        max_nonfinite_updates: int = 3,
    ) -> None:
        super().__init__(
            model_path=model_path,
            optimizer=optimizer,
            lr_scheduler=lr_scheduler,
            dtype=dtype,
            mixed_precision=mixed_precision,
            runtime=runtime,
        )
        _check_limits(max_grad_norm, max_nonfinite_updates)
        self.health_threshold = health_threshold
        self.save_hyperparameters(ignore=["objective", "optimizer", "lr_scheduler"])
        self.objective = objective if objective is not None else MiniRL()
        self.max_grad_norm = max_grad_norm
        self.max_nonfinite_updates = max_nonfinite_updates
        self.nonfinite_in_row = 0
        self._step_end: float | None = None  # perf_counter() at the end of the last training_step
        self._validation_seconds = 0.0
        self.automatic_optimization = False
        self.step_metrics = StepMetrics()
        self.eval_metrics: dict[str, dict[str, PassAtK | ProblemCount | SumMetric]] = {}

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint["objective"] = describe(self.objective)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        saved, mine = checkpoint.get("objective"), describe(self.objective)
        if saved is not None and saved != mine:
            rank_zero_warn(
                f"resumed with objective {mine}, the checkpoint was trained with {saved}", category=StableRLWarning
            )

    def batch_logprobs(self, batch: RolloutBatch, entropy: bool = True) -> tuple[Tensor, Tensor | None]:
        """Position-aligned log pi and entropy (None with ``entropy=False``), [M, L] each, at the batch's
        sampling temperature."""
        return self(batch.input_ids, batch.attention_mask, batch.response_mask, batch.temperature, entropy)

    def setup(self, stage: str) -> None:
        """Refuse FSDP1 and DeepSpeed, before they wrap the model; Lightning's precision plugins, which
        would compute the policy in another dtype than the one the engine's log-probs are compared with;
        and checkpoint or log directories that cannot be written, before the first rollout."""
        precision = str(self.trainer.precision)
        if precision not in ("32-true", "32"):
            raise ValueError(
                f"trainer.precision={precision} casts the policy's forward behind stable-rl's back, a "
                "training-inference mismatch of its own: remove "
                "trainer.precision and set model.init_args.dtype (the policy's weights, e.g. bfloat16) or, with "
                "FSDP2, model.init_args.mixed_precision (bfloat16 compute over float32 weights)"
            )
        for callback in self.trainer.checkpoint_callbacks:
            if getattr(callback, "dirpath", None):
                check_writable(callback.dirpath, "the ModelCheckpoint's dirpath (or trainer.logger's save_dir)")
        if self.trainer.log_dir:
            check_writable(self.trainer.log_dir, "trainer.logger.init_args.save_dir")
        strategy = self.trainer.strategy
        if isinstance(strategy, UNSUPPORTED_STRATEGIES):
            raise ValueError(
                f"trainer.strategy {type(strategy).__name__} is not supported (it wraps the policy, whose log-prob "
                "head and engine weight sync stable-rl reads): use stable_rl.strategies.FSDP2Strategy to shard the "
                "weights (FSDP2), or ddp to replicate them"
            )

    @property
    def _processes(self) -> int:
        """Data-parallel processes sharing each global batch (1 without a trainer)."""
        return trainer.world_size if (trainer := attached_trainer(self)) is not None else 1

    def _plan(self, batch: RolloutBatch) -> BatchPlan:
        """The geometry of the global step: the data module's plan, which every batch it makes carries
        (``batch.plan``); a batch made by hand without one is a single update of the whole global batch (this
        process's share of it), forwarded whole."""
        if batch.plan is not None:
            return batch.plan
        return BatchPlan(
            batch.num_rows * self._processes // batch.group_size, batch.group_size, processes=self._processes
        )

    @contextmanager
    def policy_forward(self, phase: Phase, batch: RolloutBatch) -> Iterator[None]:
        """Around one forward (and backward) of ``batch``: the contexts of the trainer's
        ``PolicyForwardCallback``s, e.g. Routing Replay."""
        callbacks = trainer.callbacks if (trainer := attached_trainer(self)) is not None else []
        with ExitStack() as stack:
            for callback in callbacks:
                if isinstance(callback, PolicyForwardCallback):
                    stack.enter_context(callback.policy_forward(self, phase, batch))
            yield

    @torch.no_grad()
    def old_logprobs(
        self, batch: RolloutBatch, micro: int, start: int = 0, phase: Phase = "old"
    ) -> tuple[Tensor, Tensor]:
        """log pi_old and entropy before any update, [M, L] each, of rows ``start`` onwards (the rows of
        the first mini-batch get theirs from their update's forward, see ``_updates``)."""
        dtype = torch.promote_types(self.policy.dtype, torch.float32)
        logprobs = torch.zeros(batch.input_ids.shape, dtype=dtype, device=batch.input_ids.device)
        entropy = torch.zeros_like(logprobs)
        for index, part in batch.rows(slice(start, None)).length_sorted_parts(micro):
            with self.policy_forward(phase, part):
                part_logprobs, part_entropy = self.batch_logprobs(part)
            rows, width = index.to(logprobs.device) + start, part.input_ids.shape[1]
            logprobs[rows, :width], entropy[rows, :width] = part_logprobs, part_entropy
        return logprobs, entropy

    def weight_snapshot(self) -> WeightSnapshot:
        """A copy of the policy's weights now, for ``generation_logprobs`` of a rollout these weights generate while
        the update changes them (``data.overlap``): one more copy of the weights while it lives."""
        return WeightSnapshot(self.policy)

    def generation_logprobs(self, batch: RolloutBatch, weights: WeightSnapshot | None = None) -> Tensor:
        """log pi_gen [M, L] (CPU): the policy's log-probs of a rollout under the weights that generated it, the
        current ones or ``weights`` (a ``weight_snapshot``), kept with the rollout while it waits
        ``data.max_staleness`` steps to be trained on (``stable_rl.rl.health`` splits its gap to pi_old at them).
        The same pass as pi_old's, in phase "generation"."""
        batch = move_data_to_device(batch, self.device)
        with nullcontext() if weights is None else weights.loaded(self.policy):
            return self.old_logprobs(batch, self._plan(batch).micro_rows, phase="generation")[0].cpu()

    def _check_version(self, batch: RolloutBatch, plan: BatchPlan) -> None:
        """The rollout's weights are those of this step, or of at most ``plan.max_staleness`` steps before."""
        lag, limit = self.global_step - batch.policy_version, plan.max_staleness
        if 0 <= lag <= limit:
            return
        if limit == 0:
            raise RuntimeError(
                f"rollout generated with the weights of step {batch.policy_version}, expected {self.global_step}: "
                "the engine must be synced right before every rollout (on-policy lag 0)"
            )
        raise RuntimeError(
            f"rollout generated with the weights of step {batch.policy_version}, trained at step {self.global_step}: "
            f"expected steps {max(0, self.global_step - limit)} to {self.global_step} (data.max_staleness={limit})"
        )

    def training_step(self, batch: RolloutBatch, batch_idx: int) -> None:
        plan = self._plan(batch)
        self._check_version(batch, plan)
        mini, micro = plan.mini_rows, plan.micro_rows
        times = dict(batch.timings)
        mask = batch.response_mask  # [M, L]
        advantages = self.objective.advantages(batch.rewards.view(-1, batch.group_size)).view(-1)  # [M]
        with timed(times, "pi_old"):
            old_logprobs, entropy = self.old_logprobs(batch, micro, start=mini)  # [M, L], mini-batches 2..N
        with timed(times, "update"):
            skipped = self._updates(batch, old_logprobs, entropy, advantages, mini, micro)  # fills mini-batch 1
        metrics = self.step_metrics
        metrics.mean("reward", batch.rewards)
        groups = batch.rewards.view(-1, batch.group_size)  # [prompts, G]
        metrics.mean("groups_with_signal", (groups != groups[:, :1]).any(-1))  # rewards differ: nonzero advantages
        metrics.mean("response_length", mask.sum(-1))
        metrics.mean("kl", batch.rollout_logprobs - old_logprobs, mask)  # KL[mu_old || pi_old], the paper's estimate
        metrics.mean("kl_k3", token_kl(batch.rollout_logprobs, old_logprobs), mask)  # the same, lower variance
        metrics.mean("entropy", entropy, mask)

        self.log("train/skipped_updates", float(skipped), batch_size=batch.num_rows)
        timeouts = torch.tensor(float(batch.verifier_timeouts), device=self.device)  # this process's responses
        self.log(
            "train/verifier_timeouts",
            self.trainer.strategy.reduce(timeouts, reduce_op="sum"),
            batch_size=batch.num_rows,
        )
        for name, value in metrics.compute().items():
            self.log(f"train/{name}", value, prog_bar=name in PROGRESS_BAR, batch_size=batch.num_rows)
        self.log("train/policy_version", float(batch.policy_version), batch_size=batch.num_rows)
        self._log_times(times, batch.num_rows)

    def _updates(
        self, batch: RolloutBatch, old_logprobs: Tensor, entropy: Tensor, advantages: Tensor, mini: int, micro: int
    ) -> int:
        """One optimizer update per mini-batch of ``mini`` rows; returns how many were skipped as non-finite.

        The first mini-batch is updated from the weights pi_old itself (and, with Routing Replay, the same
        routes), so its forward *is* the pi_old pass: its log-probs, detached, are log pi_old, written into
        ``old_logprobs`` and ``entropy`` for its rows (no separate recompute: on-policy, N = 1, has none)."""
        optimizer, scheduler = self.optimizers(), self.lr_schedulers()
        skipped = 0
        for start in range(0, batch.num_rows, mini):
            mini_batch = batch.rows(slice(start, start + mini))
            normalizer = self._global_normalizer(mini_batch.response_mask)
            optimizer.zero_grad()
            loss = 0.0
            parts = mini_batch.length_sorted_parts(micro)
            for i, (index, part) in enumerate(parts):
                rows, width = index.to(old_logprobs.device) + start, part.input_ids.shape[1]  # rows of the batch
                old = old_logprobs[rows, :width] if start else None
                with self._gradient_sync(last=i == len(parts) - 1):
                    part_loss, old, part_entropy = self._backward(part, old, advantages[rows], normalizer)
                loss = loss + part_loss
                if not start:
                    old_logprobs[rows, :width], entropy[rows, :width] = old, part_entropy
            # the global loss (the mean of the processes' scaled shares), so every process agrees on skipping
            loss = self.trainer.strategy.reduce(loss, reduce_op="mean")
            grad_norm, shard_norm = self._grad_norm()
            self.step_metrics.mean("loss", loss)
            self.step_metrics.mean("grad_norm", grad_norm)
            if not (torch.isfinite(loss) and torch.isfinite(grad_norm)):
                self._skip_update(optimizer)
                skipped += 1
                continue
            self.nonfinite_in_row = 0
            if self.max_grad_norm is not None:  # the fraction of updates whose direction alone is kept
                self.step_metrics.mean("grad_clipped", (grad_norm > self.max_grad_norm).float())
                self._clip_gradients(shard_norm)
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
        return skipped

    def _global_normalizer(self, response_mask: Tensor) -> Tensor:
        """The objective's constant for the whole mini-batch, over all processes; data-parallel
        strategies average gradients over the processes, so it comes back divided by their number
        (each process's loss is then its share of the global loss, times the number of processes)."""
        normalizer = self.objective.normalizer(response_mask).to(self.device)
        return self.trainer.strategy.reduce(normalizer, reduce_op="mean")  # sum / processes; as is with one

    def _gradient_sync(self, last: bool):
        """DDP: gradients are all-reduced once per update, on its last micro-batch. FSDP2 has no ``no_sync``:
        it reduce-scatters each micro-batch's gradient, so no process ever holds a whole gradient."""
        model = self.trainer.strategy.model if attached_trainer(self) is not None else None
        if last or not hasattr(model, "no_sync"):
            return nullcontext()
        return model.no_sync()

    def _log_times(self, times: dict[str, float], batch_size: int) -> None:
        """``time/<phase>`` of this step, and from the second step on ``time/step`` (wall time since the
        previous step ended, validation excluded) and ``time/overhead`` (the part no phase of the main thread accounts
        for: ``time/background/<phase>``, rollouts generated in a thread while the update runs, overlap the others)."""
        now = time.perf_counter()
        if self._step_end is not None:
            times["step"] = now - self._step_end - self._validation_seconds
            foreground = (v for k, v in times.items() if k != "step" and not k.startswith("background/"))
            times["overhead"] = times["step"] - sum(foreground)
        for phase, seconds in times.items():
            self.log(f"time/{phase}", seconds, batch_size=batch_size)
        self._validation_seconds = 0.0
        self._step_end = time.perf_counter()

    def on_validation_start(self) -> None:
        self._validation_start = time.perf_counter()

    def on_validation_end(self) -> None:
        if self._step_end is not None:
            self._validation_seconds += time.perf_counter() - self._validation_start

    def _backward(
        self, part: RolloutBatch, old_logprobs: Tensor | None, advantages: Tensor, normalizer: Tensor
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """Backward of one micro-batch's share of the mini-batch loss: (that share, log pi_old, entropy).
        ``old_logprobs`` None: this forward is also the pi_old pass (phase "first"), whose detached
        log-probs and entropy are returned; otherwise they are passed through (entropy None)."""
        first = old_logprobs is None
        with self.policy_forward("first" if first else "update", part):
            logprobs, entropy = self.batch_logprobs(part, entropy=first)
            old_logprobs = logprobs.detach() if first else old_logprobs
            out = self.objective(
                LossInputs(logprobs, old_logprobs, part.rollout_logprobs, advantages, part.response_mask)
            )
            loss = out.token_loss.sum() / normalizer
            self.manual_backward(loss)
        for name, values in out.token_metrics.items():
            self.step_metrics.mean(name, values, part.response_mask)
        for name, values in out.sequence_metrics.items():
            self.step_metrics.mean(name, values, part.response_mask.any(-1))
        if "is_weight" in out.token_metrics:
            self.step_metrics.max("is_weight_max", out.token_metrics["is_weight"], part.response_mask)
        self._log_health(logprobs, old_logprobs, part)
        return loss.detach(), old_logprobs, entropy

    def _skip_update(self, optimizer) -> None:
        """Drop a non-finite update but count its step (``global_step`` counts update slots, so step-based
        checkpoints, ``max_steps`` and the rollouts' policy versions stay on their schedule)."""
        optimizer.zero_grad()
        count_skipped_optimizer_step(self.trainer)
        self.nonfinite_in_row += 1
        rank_zero_warn(
            f"non-finite loss or gradient at step {self.global_step - 1}: update skipped "
            f"({self.nonfinite_in_row} in a row, model.max_nonfinite_updates={self.max_nonfinite_updates})",
            category=StableRLWarning,
        )

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        """Stop after ``max_nonfinite_updates`` non-finite updates in a row, with a checkpoint written at
        the end of the global step (where Lightning's own checkpoints resume from), if its state is finite."""
        if self.nonfinite_in_row < self.max_nonfinite_updates:
            return
        bad = first_nonfinite(self.policy, self.optimizers(use_pl_optimizer=False))
        anywhere = self.trainer.strategy.reduce(
            torch.tensor(float(bad is not None), device=self.device), reduce_op="sum"
        )
        if anywhere > 0:  # every process agrees, as the save is collective
            raise FloatingPointError(
                f"{self.nonfinite_in_row} updates in a row had a non-finite (NaN/inf) loss or gradient, and the "
                f"model's state is itself non-finite ({bad or 'on another process'}): an earlier update made it so "
                "(a learning rate too large, an overflow), so no checkpoint was saved. Resume with --ckpt_path from "
                "a checkpoint written before that update, with a lower model.optimizer learning rate or training in "
                "float32 (model.dtype)"
            )
        root = self.trainer.log_dir or self.trainer.default_root_dir
        path = f"{root}/checkpoints/nonfinite-step={self.global_step}.ckpt"
        self.trainer.save_checkpoint(path)
        raise FloatingPointError(
            f"{self.nonfinite_in_row} updates in a row had a non-finite (NaN/inf) loss or gradient; the weights "
            f"and optimizer are those of the last good update, saved to {path}. Check the rollouts' log-probs "
            "(train/kl, train/is_weight_max) and the rewards, lower model.optimizer's learning rate, or train in "
            "float32 (model.dtype); resume with --ckpt_path once fixed"
        )

    def _log_health(self, logprobs: Tensor, old_logprobs: Tensor, part: RolloutBatch) -> None:
        """First-order health of the surrogate on one micro-batch (``stable_rl.rl.health``); each part's |log-ratio|
        also as a mean weighted by the tokens' gradient share (``health/<part>_abs_by_gradient``), and the
        per-response training-inference gap's median and 90th percentile (``health/seq_train_infer_abs_p50``, ``_p90``)."""
        mask = part.response_mask
        generation = old_logprobs if part.generation_logprobs is None else part.generation_logprobs
        tokens, gaps = health_metrics(
            logprobs, old_logprobs, part.rollout_logprobs, mask, self.health_threshold, generation
        )
        for name, values in tokens.items():
            self.step_metrics.mean(f"health/{name}", values, mask)
        share = gradient_share(old_logprobs)  # where the update is: a near-deterministic policy's few uncertain tokens
        for name in PARTS:
            self.step_metrics.quantile(f"health/{name}_abs_p99", tokens[f"{name}_abs"], mask, 0.99)
            self.step_metrics.mean(f"health/{name}_abs_by_gradient", tokens[f"{name}_abs"], mask, weight=share)
        self.step_metrics.mean("health/seq_linearisation_gap", gaps)
        self.step_metrics.max("health/seq_linearisation_gap_max", gaps)
        responses = mask.any(-1)
        train_infer_gap = sequence_train_infer_gap(generation - part.rollout_logprobs, mask)
        for q in (0.5, 0.9):
            self.step_metrics.quantile(f"health/seq_train_infer_abs_p{round(q * 100)}", train_infer_gap, responses, q)

    def _grad_norm(self) -> tuple[Tensor, Tensor]:
        """The L2 norm of the whole gradient (of all shards, under FSDP2), and the same as computed (a DTensor
        under FSDP2: what scales DTensor gradients)."""
        norm = torch.nn.utils.get_total_norm([p.grad for p in self.policy.parameters() if p.grad is not None])
        return (norm.full_tensor() if isinstance(norm, DTensor) else norm), norm

    def _clip_gradients(self, norm: Tensor) -> None:
        """Rescale the gradient to ``max_grad_norm`` where its norm is above it (torch's ``clip_grad_norm_``
        rule), from the norm already computed for the log: one pass over the gradients, not two."""
        params = [p for p in self.policy.parameters() if p.grad is not None]
        torch.nn.utils.clip_grads_with_norm_(params, self.max_grad_norm, norm)

    def validation_step(self, batch: EvalBatch, batch_idx: int, dataloader_idx: int = 0) -> None:
        n = batch.rewards.shape[-1]
        if batch.eval_set not in self.eval_metrics:
            ks = [2**i for i in range(n.bit_length()) if 2**i <= n]
            metrics = {f"avg@{n}": AvgAtK()} | {f"pass@{k}": PassAtK(k) for k in ks} | {"problems": ProblemCount()}
            metrics["verifier_timeouts"] = SumMetric()  # samples scored 0 after the verifier's timeout
            self.eval_metrics[batch.eval_set] = {name: m.to(self.device) for name, m in metrics.items()}
        for name, metric in self.eval_metrics[batch.eval_set].items():
            metric.update(float(batch.verifier_timeouts) if name == "verifier_timeouts" else batch.rewards)

    def on_validation_epoch_end(self) -> None:
        for eval_set, metrics in self.eval_metrics.items():
            for name, metric in metrics.items():
                self.log(f"val/{eval_set}/{name}", metric.compute(), add_dataloader_idx=False)  # reduced by compute()
        self.eval_metrics = {}
