"""RolloutDataModule: prompts in, verified rollouts of the current policy out.

The dataloader yields only problems (cheap, so Lightning's one-batch prefetch is harmless); the
rollout happens in ``on_before_batch_transfer``, which Lightning calls right before each
``training_step``, after the previous step's updates. There the engine is synced to the policy's
current weights, samples G responses per prompt, and the verifier scores them, so every rollout
comes from the weights of the step right before it (on-policy lag 0). With ``max_staleness`` = k >= 1
the rollout of step t + k is generated there instead, and the one generated k steps earlier is trained on
(``stable_rl.rl.in_flight``); with ``overlap`` (the default at k >= 1) it is generated in a thread of its own while
step t trains, with the same numbers. Validation works the same
way on the ``eval_sets`` (one dataloader each), with its own ``eval_sampling`` and n samples
per problem, yielding ``EvalBatch`` rewards for avg@n and pass@k.
"""

import os
from dataclasses import dataclass
from functools import partial
from typing import Any

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader, DistributedSampler
from transformers import AutoConfig

from stable_rl.batch_plan import BatchPlan
from stable_rl.data.gold_answers import usable_problems
from stable_rl.data.prompt_batches import PromptBatches
from stable_rl.data.prompts import Problem, PromptSource
from stable_rl.data.template import PromptTemplate
from stable_rl.data.verifier import MathVerifier
from stable_rl.interfaces import generation_logprobs, policy_weights
from stable_rl.padding import pad_id
from stable_rl.policy.model_dir import check_model_dir, checked_tokenizer
from stable_rl.rl.background import Background
from stable_rl.rl.in_flight import InFlight
from stable_rl.rollout import EvalBatch, RolloutBatch, RolloutEngine, Sampling
from stable_rl.timing import timed


@dataclass(frozen=True)
class Ahead:
    """Rollouts generated in the background (``overlap``): the thread's job, which returns the verified batches and
    the seconds of its phases, and the weights that generate them (for log pi_gen; None without it)."""

    job: Background[tuple[list[RolloutBatch], dict[str, float]]]
    weights: Any


@dataclass(frozen=True)
class EncodedProblem:
    prompt_ids: list[int]
    answer: str
    index: int = 0  # an evaluation problem's position in its set: its samples' seeds (Engine.request_seed)


class RolloutDataModule(L.LightningDataModule):
    """Drives the rollout engine on math prompts with binary verifier rewards.

    Args:
        prompts: the problem source, e.g. ``stable_rl.data.ReasoningGymPrompts``.
        engine: the rollout engine, ``stable_rl.rollout.VLLMEngine`` or ``HFEngine``.
        verifier: reward function (default: math-verify on the last ``\\boxed{}``).
        template: how questions become prompt tokens (default: chat template + boxed instruction).
        prompts_per_step: prompts per global step (paper: B x N); the global batch is this x ``group_size``.
        group_size: responses per prompt, G (paper: 16); the advantage baseline is their mean.
        mini_batch_size: responses per optimizer update, over all processes; None = the whole global batch
            (N = 1, on-policy). N = global batch / this updates per rollout (paper: N > 1 off-policy).
        micro_batch_size: responses per forward/backward of one process (memory only: results do not change
            beyond float rounding); rows of similar length go together and each micro-batch is cut to its
            longest row, so less padding is computed. None = the process's share of a mini-batch.
        max_prompt_tokens: longest prompt accepted; longer ones are an error.
        seed: seed of the prompt order, and the engine's unless it has its own; None (default): the
            run's ``seed_everything``, so runs of different seeds see different prompts and samples.
        eval_sets: named evaluation sets, e.g. ``{heldout: ReasoningGymPrompts(seed=1000), asdiv: ASDivPrompts}``;
            problems whose question is also a training question are dropped from them.
        eval_samples: samples per evaluation problem, n of avg@n (paper: 32).
        eval_sampling: how evaluation samples are drawn (default: the engine's training sampling).
        eval_prompts_per_batch: evaluation problems per engine call.
        model_path: the policy's model directory (tokenizer, context, the engine's model); the CLI links it
            from ``model.init_args.model_path``.
        max_staleness: k, how many steps before the step that trains on it a batch is generated (0: synchronous,
            on-policy lag 0; 1: one-step-off-policy pipelining). The batch trained at step t comes from the weights
            of step t - k (of step 0 for the first k steps); k batches wait in memory and in checkpoints, and the
            trainer scores each once more with the weights that generated it (``time/pi_gen``, for ``train/health``).
        overlap: at k >= 1, generate (and verify) the batch of step t + k in a thread of its own while step t trains,
            from the weights of step t, synced before the update starts; the thread is joined at the next step's
            rollout (or before a checkpoint, a validation, the end), and every number is the one the sequential
            order (false) gives: same samples (seeded by step), same log pi_gen, same metrics. None: true at k >= 1.
            Needs one engine per process (``tensor_parallel_size: 1`` in data-parallel runs).
        generation_logprobs: at k >= 1, score each batch with the weights that generated it (log pi_gen, splitting
            ``train/health`` into its training-inference and staleness parts). With ``overlap`` the update changes
            those weights while the batch is generated, so a copy of the policy's weights (the process's shard, on
            its device) is kept from the sync until the batch is joined; false: no copy and no pass, and the split
            is measured at pi_old as at k = 0 (``train_infer`` then includes the k steps of staleness).

    These sizes are the step's geometry: ``setup`` checks them once in a ``BatchPlan``, which every batch
    carries to the policy module.
    """

    def __init__(
        self,
        prompts: PromptSource,
        engine: RolloutEngine,
        verifier: MathVerifier | None = None,
        template: PromptTemplate | None = None,
        prompts_per_step: int = 8,
        group_size: int = 8,
        mini_batch_size: int | None = None,
        micro_batch_size: int | None = None,
        max_prompt_tokens: int = 256,
        seed: int | None = None,
        eval_sets: dict[str, PromptSource] | None = None,
        eval_samples: int = 4,
        eval_sampling: Sampling | None = None,
        eval_prompts_per_batch: int = 32,
        model_path: str | None = None,
        max_staleness: int = 0,
        overlap: bool | None = None,
        generation_logprobs: bool = True,
    ) -> None:
        super().__init__()
        for name, value in (
            ("prompts_per_step", prompts_per_step),
            ("max_prompt_tokens", max_prompt_tokens),
            ("eval_samples", eval_samples),
            ("eval_prompts_per_batch", eval_prompts_per_batch),
        ):
            if value < 1:
                raise ValueError(f"data.init_args.{name}={value} must be at least 1")
        for name, size in (("mini_batch_size", mini_batch_size), ("micro_batch_size", micro_batch_size)):
            if size is not None and size < 1:  # 0 would read as "the whole batch"
                raise ValueError(f"data.init_args.{name}={size} must be at least 1, or null for the whole batch")
        if max_staleness < 0:
            raise ValueError(
                f"data.init_args.max_staleness={max_staleness} must be at least 0: the steps a rollout waits "
                "before it is trained on (0: synchronous, 1: one-step-off-policy pipelining)"
            )
        if overlap and not max_staleness:
            raise ValueError(
                "data.init_args.overlap: true with max_staleness: 0: the synchronous loop trains on the rollout it has "
                "just generated, so there is nothing to overlap; set max_staleness >= 1 or remove overlap"
            )
        if group_size < 2:
            raise ValueError(f"group_size={group_size}: the group baseline needs data.group_size >= 2")
        if engine.sampling.temperature <= 0 or engine.sampling.top_p != 1.0:
            raise ValueError(
                f"training rollouts need temperature > 0 and top_p = 1 (got {engine.sampling.temperature}, "
                f"{engine.sampling.top_p}): the surrogate's IS weight pi_theta/mu_old compares full tempered "
                "distributions; set greedy or nucleus sampling in data.eval_sampling only"
            )
        self.prompts = prompts
        self.engine = engine
        self.verifier = verifier if verifier is not None else MathVerifier()
        self.template = template if template is not None else PromptTemplate()
        self.prompts_per_step = prompts_per_step
        self.group_size = group_size
        self.max_prompt_tokens = max_prompt_tokens
        self.seed = seed
        self.eval_sets = eval_sets or {}
        self.eval_samples = eval_samples
        self.eval_sampling = eval_sampling or engine.sampling
        self.eval_prompts_per_batch = eval_prompts_per_batch
        self.model_path = model_path
        self.mini_batch_size = mini_batch_size
        self.micro_batch_size = micro_batch_size
        self.max_staleness = max_staleness
        self.in_flight = InFlight(max_staleness)
        self.overlap = bool(max_staleness) if overlap is None else overlap
        self.score_generation = generation_logprobs and max_staleness > 0
        self.ahead: Ahead | None = None  # the rollouts generated in the background (``overlap``)
        self.ahead_times: dict[str, float] = {}  # the seconds of joining them, for the next training batch
        self.plan: BatchPlan | None = None  # built by ``setup``, once the processes are known
        self.problems: list[EncodedProblem] = []
        self.eval_problems: dict[str, list[EncodedProblem]] = {}

    def setup(self, stage: str) -> None:
        if self.seed is None:
            self.seed = int(os.environ.get("PL_GLOBAL_SEED", 0))  # set by seed_everything
        if self.engine.seed is None:
            self.engine.seed = self.seed
        trainer = self.trainer
        self.plan = BatchPlan(
            self.prompts_per_step,
            self.group_size,
            self.mini_batch_size,
            self.micro_batch_size,
            trainer.world_size,
            self.engine.tensor_parallel_size,
            trainer.num_devices,
            self.max_staleness,
        )
        self.engine.place(self.plan, trainer.global_rank, trainer.local_rank)  # its seed stream
        if self.overlap and self.plan.processes_per_engine > 1:
            raise ValueError(
                f"data.overlap with {self.plan.processes_per_engine} processes sharing each engine "
                f"(tensor_parallel_size={self.engine.tensor_parallel_size}): the engine's collectives would run in a "
                "thread beside the update's; set data.engine.init_args.tensor_parallel_size: 1 or data.overlap: false"
            )
        if not self.problems:
            check_model_dir(self._model_path)  # before the model's config is read for its context
            self._check_context(self._model_path)
            self._load_problems(self._model_path)

    @property
    def _model_path(self) -> str:
        if self.model_path is None:
            raise ValueError(
                "RolloutDataModule has no model_path: the stable-rl CLI links it from model.init_args.model_path; "
                "in code, pass the policy's model_path to the data module"
            )
        return self.model_path

    @property
    def longest_response(self) -> int:
        """The most new tokens a response may have, in training or evaluation."""
        return max(self.engine.sampling.max_new_tokens, self.eval_sampling.max_new_tokens)

    def _check_context(self, model_path: str) -> None:
        """A prompt and a response must fit the model's context; said here, not by vLLM once it starts. The model
        directory is checked first: its config is the first thing of the model a run loads."""
        check_model_dir(model_path)
        limit = getattr(AutoConfig.from_pretrained(model_path), "max_position_embeddings", None)
        if limit is not None and self.max_prompt_tokens + self.longest_response > limit:
            raise ValueError(
                f"data.max_prompt_tokens={self.max_prompt_tokens} + max_new_tokens={self.longest_response} (the "
                f"engine's or data.eval_sampling's) = {self.max_prompt_tokens + self.longest_response} tokens exceed "
                f"the model's context of {limit} (max_position_embeddings of {model_path}): lower one of them"
            )

    def _load_problems(self, model_path: str) -> None:
        """Tokenize the training problems and the evaluation sets (minus training questions), each without the
        problems whose gold answer math-verify cannot use."""
        self.tokenizer = checked_tokenizer(model_path)
        training = self._usable(self.prompts, "data.prompts")
        self.problems = [self._encode(p.question, p.answer) for p in training]
        if len(self.problems) < self.prompts_per_step:
            raise ValueError(
                f"{len(self.problems)} problems is fewer than data.prompts_per_step={self.prompts_per_step}: "
                "give the prompt source more problems or lower prompts_per_step"
            )
        seen = {p.question for p in training}
        for name, source in self.eval_sets.items():
            kept = [p for p in self._usable(source, f"evaluation set {name!r}") if p.question not in seen]
            self.eval_problems[name] = [self._encode(p.question, p.answer, index=i) for i, p in enumerate(kept)]
            if not self.eval_problems[name]:
                raise ValueError(
                    f"evaluation set {name!r} has no problems left after removing training questions (and any whose "
                    "gold answer math-verify cannot use)"
                )

    def _usable(self, source: PromptSource, where: str) -> list[Problem]:
        """The source's problems whose gold answer the verifier can use (``stable_rl.data.gold_answers``)."""
        path = getattr(source, "path", None)  # a file's path names it in the warning
        return usable_problems(source.load(), self.verifier, f"{where} ({path})" if path else where)

    def _encode(self, question: str, answer: str, index: int = 0) -> EncodedProblem:
        ids = self.template.encode(self.tokenizer, question)
        if len(ids) > self.max_prompt_tokens:
            raise ValueError(
                f"prompt of {len(ids)} tokens exceeds data.max_prompt_tokens={self.max_prompt_tokens} "
                f"({question[:60]!r}...): raise max_prompt_tokens or filter long problems"
            )
        return EncodedProblem(ids, answer, index)

    def train_dataloader(self) -> PromptBatches[EncodedProblem]:
        """Problems only (rollouts happen in ``on_before_batch_transfer``), resumable mid-epoch; each
        engine gets its share of every global batch (the shares of the processes sharing it)."""
        return PromptBatches(self.problems, self._plan, self.seed, self.trainer.global_rank)

    @property
    def _plan(self) -> BatchPlan:
        if self.plan is None:
            raise RuntimeError("RolloutDataModule.setup builds the batch plan: call it first")
        return self.plan

    def val_dataloader(self) -> list[DataLoader]:
        """One per evaluation set; processes sharing an engine get the same problems (their results count
        once per process, which leaves avg@n and pass@k as they are)."""
        shared, world = self._plan.processes_per_engine, self.trainer.world_size
        loaders = []
        for problems in self.eval_problems.values():
            sampler = None
            if world > 1:  # Lightning keeps a DistributedSampler given to it
                engines = world // shared
                sampler = DistributedSampler(problems, engines, self.trainer.global_rank // shared, shuffle=False)
            loaders.append(DataLoader(problems, self.eval_prompts_per_batch, sampler=sampler, collate_fn=list))
        return loaders

    def on_before_batch_transfer(self, batch, dataloader_idx: int):
        if self.trainer.training:
            return self.rollout(batch)
        if self.trainer.validating or self.trainer.sanity_checking:
            return self.evaluate(batch, list(self.eval_problems)[dataloader_idx])
        return batch

    def _sync(self) -> int:
        """Load the policy's current weights into the engine (a no-op if it has them); returns the step.

        The engine starts here, at its first use (and again after a teardown), so callbacks' ``setup``
        can still configure it (e.g. Routing Replay R3 turns on ``return_routes``)."""
        if not self.engine.running:
            self.engine.start(self._model_path, self.max_prompt_tokens + self.longest_response)
        step = self.trainer.global_step
        self.engine.sync(policy_weights(self.trainer).full_weights(), version=step)  # all processes at once
        return step

    def _rewards(self, problems: list[EncodedProblem], samples, per_problem: int) -> tuple[Tensor, int]:
        """The samples' rewards and how many of them ran out of the verifier's time (scored 0)."""
        texts = self.tokenizer.batch_decode([s.response_ids for s in samples], skip_special_tokens=True)
        rewards, timed_out = self.verifier.score(texts, [p.answer for p in problems for _ in range(per_problem)])
        return rewards, int(timed_out.sum())

    @torch.no_grad()
    def evaluate(self, problems: list[EncodedProblem], eval_set: str) -> EvalBatch:
        """``eval_samples`` responses per problem with the evaluation sampling, verified."""
        self._join_ahead()  # the engine is free again
        step = self._sync()
        samples = self.engine.generate(  # seeded by position: batches sharing seeds would draw problems alike
            [p.prompt_ids for p in problems], self.eval_samples, step, self.eval_sampling, problems[0].index
        )
        rewards, timeouts = self._rewards(problems, samples, self.eval_samples)
        return EvalBatch(
            rewards=rewards.view(len(problems), self.eval_samples),
            eval_set=eval_set,
            verifier_timeouts=timeouts,
            problem_index=torch.tensor([p.index for p in problems]),
        )

    @torch.no_grad()
    def rollout(self, window: list[EncodedProblem]) -> RolloutBatch:
        """Sync the engine to the current policy, sample G responses per problem, verify them, and return the
        batch of this step: at k = ``max_staleness`` = 0 the one just sampled; else the one sampled k steps ago,
        after sampling the batch of step t + k (``window``: the problems of steps t .. t + k, ``PromptBatches``),
        here or, with ``overlap``, in a thread while this step trains (joined by the next). It carries the seconds
        each phase of this step took (``time/sync``, ``time/rollout``, ``time/sleep``, ``time/reward``,
        ``time/pi_gen`` at k >= 1; with ``overlap`` ``time/wait``, the join, and ``time/background/<phase>``)."""
        if self.overlap:
            self._join_ahead()
        times, self.ahead_times = self.ahead_times, {}
        with timed(times, "sync"):
            step = self._sync()
        size = len(window) // (self.max_staleness + 1)
        steps = [window[a * size : (a + 1) * size] for a in range(self.max_staleness + 1)]  # problems of t .. t + k
        ahead = self.in_flight.missing()
        now = [a for a in ahead if a == 0 or not self.overlap]  # overlapped, only this step's is needed now
        later = [a for a in ahead if a not in now]
        with timed(times, "rollout"):  # each seeded by the step that trains on it, as at k = 0
            sampled = [self._sample(steps[a], step + a) for a in now]
        if not later:
            with timed(times, "sleep"):
                self.engine.sleep()  # the update gets the engine's memory (vLLM's sleep mode on GPUs)
        for a, samples in zip(now, sampled, strict=True):
            self.in_flight.batches.append(self._scored(self._batch(steps[a], samples, step, times), times))
        if later:
            weights = generation_logprobs(self.trainer).weight_snapshot() if self.score_generation else None
            job = partial(self._generate, [steps[a] for a in later], [step + a for a in later], step)
            self.ahead = Ahead(Background(job, f"rollout-ahead-{step}"), weights)
        batch = self.in_flight.batches.popleft()
        batch.timings = times
        batch.plan = self.plan
        return batch

    def _sample(self, problems: list[EncodedProblem], step: int) -> list:
        """G samples of each problem, seeded by ``step``, the step that trains on them."""
        return self.engine.generate([p.prompt_ids for p in problems], self.group_size, step)

    @torch.no_grad()
    def _generate(
        self, problems: list[list[EncodedProblem]], seed_steps: list[int], step: int
    ) -> tuple[list[RolloutBatch], dict[str, float]]:
        """The background job (``overlap``): the batches of ``problems`` (one list per step ahead) generated by the
        weights of ``step`` and verified, and the seconds of its phases."""
        times: dict[str, float] = {}
        with timed(times, "rollout"):
            sampled = [self._sample(p, seed_step) for p, seed_step in zip(problems, seed_steps, strict=True)]
        with timed(times, "sleep"):
            self.engine.sleep()
        return [self._batch(p, samples, step, times) for p, samples in zip(problems, sampled, strict=True)], times

    def _join_ahead(self) -> None:
        """Wait for the rollouts generated in the background, score them with the weights that generated them and
        queue them (raising the thread's error if it failed); a no-op when none are."""
        ahead = self.ahead
        if ahead is None:
            return
        try:
            with timed(self.ahead_times, "wait"):
                batches, background = ahead.job.join()
        finally:
            if ahead.job.done:  # else interrupted while waiting: ``on_exception`` waits again
                self.ahead = None
        for batch in batches:
            self.in_flight.batches.append(self._scored(batch, self.ahead_times, ahead.weights))
        self.ahead_times |= {f"background/{phase}": seconds for phase, seconds in background.items()}

    def _scored(self, batch: RolloutBatch, times: dict[str, float], weights: Any = None) -> RolloutBatch:
        """``batch`` with its log pi_gen (``generation_logprobs`` at k >= 1) under the current weights, or
        ``weights``, the snapshot of those that generated it."""
        if self.score_generation:
            with timed(times, "pi_gen"):
                batch.generation_logprobs = generation_logprobs(self.trainer).generation_logprobs(batch, weights)
        return batch

    def _batch(self, problems: list[EncodedProblem], samples: list, step: int, times: dict[str, float]) -> RolloutBatch:
        """This process's part of one rollout, verified, as a batch generated by the weights of ``step``."""
        problems, samples = self._own_part(problems, samples)
        with timed(times, "reward"):
            rewards, timeouts = self._rewards(problems, samples, self.group_size)
        batch = RolloutBatch.from_samples(
            samples,
            rewards=rewards,
            group_size=self.group_size,
            pad_token_id=pad_id(self.tokenizer),
            temperature=self.engine.sampling.temperature,
            policy_version=step,
        )
        batch.verifier_timeouts = timeouts
        batch.plan = self.plan
        return batch

    def state_dict(self) -> dict:
        """The rollouts in flight (none at k = 0: the checkpoint is as without pipelining), those generated in the
        background included (waited for: the checkpoint is the one the sequential order writes)."""
        self._join_ahead()
        return self.in_flight.state_dict()

    def load_state_dict(self, state_dict: dict) -> None:
        self.in_flight.load_state_dict(state_dict)

    def _own_part(self, problems: list[EncodedProblem], samples: list) -> tuple[list[EncodedProblem], list]:
        """This process's problems and samples of a rollout its engine made for the processes sharing it:
        its consecutive part of each of the N mini-batches' shares (as ``PromptBatches`` would give it)."""
        if self._plan.processes_per_engine == 1:
            return problems, samples
        mine, g = self._plan.own_share(self.trainer.global_rank), self.group_size
        return [problems[i] for i in mine], [samples[i * g + j] for i in mine for j in range(g)]

    def request_routes(self) -> None:
        """Rollouts return each token's routed experts from now on (Routing Replay R3)."""
        self.engine.enable_routes()

    def on_exception(self, exception: BaseException) -> None:
        """A run that fails or is interrupted waits for the rollouts in the background (the engine is shut down
        after them; their error, if any, is left out: ``exception`` is the run's)."""
        if self.ahead is not None:
            self.ahead.job.wait()
            self.ahead = None

    def teardown(self, stage: str) -> None:
        try:
            self._join_ahead()  # kept, as the sequential order keeps them; and an error of the last ones is raised
        finally:
            self.engine.close()
            self.verifier.close()
