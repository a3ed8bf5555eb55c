"""The rollout-engine interface shared by the vLLM and HF engines."""

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from torch import Tensor

from stable_rl.batch_plan import BatchPlan
from stable_rl.dtypes import Dtype
from stable_rl.rollout.weight_noise import check_weight_noise, perturbed


@dataclass(frozen=True)
class Sampling:
    """How responses are sampled (training rollouts and evaluation may differ).

    Args:
        max_new_tokens: cap on response length.
        temperature: sampling temperature (0 = greedy); log mu_old is that of the tempered distribution.
        top_p: nucleus sampling mass (1.0 samples from the full distribution, as the surrogate assumes).
    """

    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        where = "data.engine.init_args (training) or data.eval_sampling (evaluation)"
        if self.max_new_tokens < 1:
            raise ValueError(
                f"max_new_tokens={self.max_new_tokens}: a response needs at least 1 token; set it in {where}"
            )
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError(
                f"temperature={self.temperature}, top_p={self.top_p}: need temperature >= 0 (0 = greedy) and "
                f"0 < top_p <= 1; set them in {where}"
            )


@dataclass(frozen=True)
class Sample:
    """One sampled response and the engine's log mu_old of each sampled token."""

    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]  # [len(response_ids)], of the distribution actually sampled from
    routes: np.ndarray | None = None  # [positions, MoE layers, k] int16 experts of every token fed to the
    # model (prompt + response but the last token), when the engine returns routes (Routing Replay R3)


class RolloutEngine(ABC):
    """Samples G responses per prompt with the policy's current weights.

    Args:
        max_new_tokens: the training rollouts' ``Sampling``: most tokens per response.
        temperature: the training rollouts' ``Sampling``: temperature (> 0).
        top_p: the training rollouts' ``Sampling``: nucleus mass (1: the full distribution).
        dtype: the engine's precision, separate from training ("float32" matches training exactly;
            "bfloat16" is a real training-inference mismatch).
        seed: base seed; each request's seed derives from it, the step and its index. None (default):
            the data module sets the run's seed (``seed_everything``); a standalone engine uses 0.
        return_routes: also return each token's routed experts (MoE models; needed by Routing Replay
            R3, whose callback turns this on).
        weight_noise: the mismatch dial (``stable_rl.rollout.weight_noise``): every weight synced in is
            multiplied by (1 + weight_noise * eps), eps ~ N(0, 1), fresh at every sync; 0: the policy's weights.
    """

    def __init__(
        self,
        max_new_tokens: int = 64,
        temperature: float = 1.0,
        top_p: float = 1.0,
        dtype: Dtype = "float32",
        seed: int | None = None,
        return_routes: bool = False,
        weight_noise: float = 0.0,
    ) -> None:
        self.sampling = Sampling(max_new_tokens, temperature, top_p)
        self.dtype = dtype
        self.seed = seed
        self.return_routes = return_routes
        self.weight_noise = check_weight_noise(weight_noise)
        self.version: int | None = None  # global step of the weights the engine holds

    @abstractmethod
    def start(self, model_path: str, max_model_len: int) -> None:
        """Load the model at ``model_path``; prompt plus response will be at most ``max_model_len`` tokens."""

    @abstractmethod
    def load_weights(self, named_tensors: Iterable[tuple[str, Tensor]]) -> None:
        """Replace the engine's weights in place with the policy's (HF parameter names)."""

    @abstractmethod
    def generate(
        self,
        prompt_ids: list[list[int]],
        group_size: int,
        step: int,
        sampling: Sampling | None = None,
        first_index: int = 0,
    ) -> list[Sample]:
        """``group_size`` samples per prompt, grouped by prompt: len = len(prompt_ids) * group_size.

        ``sampling`` (evaluation) replaces the engine's training ``Sampling`` and draws from a
        separate seed stream. ``first_index``: the first prompt's index among the step's prompts (see
        ``request_seed``), so calls that split one step's prompts (an evaluation's batches) draw apart."""

    @abstractmethod
    def close(self) -> None:
        """Release the engine's resources; ``start`` may be called again after."""

    @property
    @abstractmethod
    def running(self) -> bool:
        """Whether ``start`` has loaded a model that ``close`` has not released."""

    def sleep(self) -> None:
        """Free what the engine holds on the device until the next ``sync`` (called after each training
        rollout, before the update); engines that cannot sleep keep it."""
        return None

    def enable_routes(self) -> None:
        """Return routes from now on; a running engine is closed so its next start captures them."""
        if not self.return_routes:
            self.return_routes = True
            if self.running:
                self.close()

    def with_routes(self, sampling: Sampling | None) -> bool:
        """Whether a ``generate`` call returns routes: only training rollouts need them, not evaluation."""
        return self.return_routes and sampling is None

    def stream(self, sampling: Sampling | None) -> int:
        """Seed stream: 0 for training rollouts, 1 for evaluation."""
        return 0 if sampling is None else 1

    def sync(self, named_tensors: Iterable[tuple[str, Tensor]], version: int) -> None:
        """Load the policy's weights of global step ``version`` unless the engine holds them already (perturbed by
        ``weight_noise``, where set)."""
        if self.version != version:
            if self.weight_noise:
                named_tensors = perturbed(named_tensors, self.weight_noise, self.base_seed, version)
            self.load_weights(named_tensors)
            self.version = version

    rank = 0  # which of the data-parallel engines this is (set by ``place``)
    processes_per_engine = 1  # consecutive processes sharing this engine, sampling the same prompts (``place``)
    tensor_parallel_size = 1  # processes one engine spans in a data-parallel run (VLLMEngine: its setting)

    def place(self, plan: BatchPlan, process: int, local_process: int) -> None:
        """Data-parallel runs: this engine serves process ``process`` (``local_process`` on its node) of
        ``plan``, shared by ``plan.processes_per_engine`` consecutive processes."""
        self.rank = plan.engine_rank(process)
        self.processes_per_engine = plan.processes_per_engine

    @property
    def base_seed(self) -> int:
        """``seed`` (0 when unset), moved by the data-parallel engine's rank: each engine samples from its
        own stream, also when the seed is set by hand."""
        return (0 if self.seed is None else self.seed) + 7919 * self.rank

    def request_seed(self, step: int, index: int, group_size: int, stream: int = 0) -> int:
        """A reproducible seed for prompt ``index`` of ``step``; its G samples use seed + 0..G-1 (vLLM's
        rule for ``n > 1``), so no two samples of a step share one. ``stream`` separates training
        rollouts (0) from evaluation (1)."""
        base = ((self.base_seed * 1_000_003 + stream * 100_003 + step) * 1_000_003) % (2**31 - 1)
        return (base + index * group_size) % (2**31 - 1)
