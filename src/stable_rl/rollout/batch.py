"""RolloutBatch: what the DataModule hands the PolicyModule for one global step."""

from dataclasses import dataclass, field, fields, replace

import torch
from torch import Tensor

from stable_rl.batch_plan import BatchPlan
from stable_rl.padding import right_pad
from stable_rl.rollout.engine import Sample
from stable_rl.routing.hooks import ROUTE_DTYPE


@dataclass
class RolloutBatch:
    """P prompts x G responses = M rows, each prompt followed by its response, right-padded.

    Position-aligned: ``rollout_logprobs[i, t]`` is log mu_old(input_ids[i, t] | input_ids[i, :t]),
    set where ``response_mask[i, t]`` is True and 0 elsewhere; ``routes[i, t]`` are the experts the
    engine routed ``input_ids[i, t]`` to in each MoE layer (-1: no route, see ``stable_rl.routing``).
    """

    input_ids: Tensor  # [M, L] long
    attention_mask: Tensor  # [M, L] bool
    response_mask: Tensor  # [M, L] bool
    rollout_logprobs: Tensor  # [M, L] float32, log mu_old
    rewards: Tensor  # [M] float32 in {0, 1}
    group_size: int  # G; rows i*G .. i*G+G-1 share a prompt
    temperature: float  # the sampling temperature mu_old used
    policy_version: int  # trainer.global_step whose weights generated the batch
    routes: Tensor | None = None  # [M, L, MoE layers, k] int16, when the engine returns routes
    row_index: Tensor | None = None  # [M] long: each row's number in the global batch (default 0..M-1)
    timings: dict[str, float] = field(default_factory=dict)  # seconds the data module spent per phase
    verifier_timeouts: int = 0  # responses that ran out of the verifier's time (scored 0)
    # the global step's geometry, set by the data module (None: a batch made by hand); not a constructor
    # argument, so Lightning's batch transfer passes it as it is, and ``rows()`` parts go without it
    plan: BatchPlan | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.row_index is None:
            self.row_index = torch.arange(self.num_rows)

    @property
    def num_rows(self) -> int:
        return self.input_ids.shape[0]

    def rows(self, index: slice | Tensor) -> "RolloutBatch":
        """The rows ``index`` (a slice or a tensor of row positions), other fields unchanged."""

        def take(value: Tensor) -> Tensor:
            return value[index if isinstance(index, slice) else index.to(value.device)]

        return replace(
            self, **{f.name: take(value) for f in fields(self) if isinstance(value := getattr(self, f.name), Tensor)}
        )

    def split(self, size: int) -> list["RolloutBatch"]:
        """Consecutive chunks of ``size`` rows."""
        return [self.rows(slice(start, start + size)) for start in range(0, self.num_rows, size)]

    def trimmed(self) -> "RolloutBatch":
        """The same rows without the padding columns after the longest row."""
        width, length = self.input_ids.shape[1], int(self.attention_mask.sum(-1).max())
        return replace(
            self,
            **{
                f.name: value[:, :length]
                for f in fields(self)
                if isinstance(value := getattr(self, f.name), Tensor) and value.dim() >= 2 and value.shape[1] == width
            },
        )

    def length_sorted_parts(self, size: int) -> list[tuple[Tensor, "RolloutBatch"]]:
        """Micro-batches of ``size`` rows, longest rows first and rows of similar length together, each
        trimmed to its longest row: ``(positions of its rows in this batch, the part)``. The padding a
        forward computes on drops (rows of 1k-4k tokens: ~1.4x fewer tokens than batch order); sums over
        tokens are unchanged."""
        order = self.attention_mask.sum(-1).cpu().argsort(descending=True, stable=True)
        return [(index, self.rows(index).trimmed()) for index in order.split(size) if len(index)]  # none if empty

    @classmethod
    def from_samples(
        cls,
        samples: list[Sample],
        rewards: Tensor,
        group_size: int,
        pad_token_id: int,
        temperature: float,
        policy_version: int,
    ) -> "RolloutBatch":
        """Pack engine samples (grouped by prompt) into right-padded tensors."""
        rows = [(s.prompt_ids, s.response_ids) for s in samples]
        input_ids, attention_mask, response_mask = right_pad(rows, pad_token_id)
        rollout_logprobs = torch.zeros(input_ids.shape, dtype=torch.float32)
        rollout_logprobs[response_mask] = torch.tensor([lp for s in samples for lp in s.logprobs], dtype=torch.float32)
        routes = None
        if samples and all(s.routes is not None for s in samples):
            routes = torch.full((*input_ids.shape, *samples[0].routes.shape[1:]), -1, dtype=ROUTE_DTYPE)
            for row, sample in enumerate(samples):
                routes[row, : len(sample.routes)] = torch.from_numpy(sample.routes)
        return cls(
            input_ids=input_ids,
            attention_mask=attention_mask,
            response_mask=response_mask,
            rollout_logprobs=rollout_logprobs,
            rewards=rewards.to(torch.float32),
            group_size=group_size,
            temperature=temperature,
            policy_version=policy_version,
            routes=routes,
        )


@dataclass
class EvalBatch:
    """Verifier rewards of n samples for each of P problems of one evaluation set."""

    rewards: Tensor  # [P, n] float32 in {0, 1}
    eval_set: str
    verifier_timeouts: int = 0  # samples that ran out of the verifier's time (scored 0)
    problem_index: Tensor | None = None  # [P] each problem's position in its evaluation set
