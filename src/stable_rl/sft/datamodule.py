"""Worked solutions for the cold start: question -> short steps -> \\boxed{answer}."""

import random
from dataclasses import dataclass

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader

from stable_rl.data.prompts import ReasoningGymPrompts
from stable_rl.data.solutions import worked_solution
from stable_rl.data.template import PromptTemplate
from stable_rl.padding import pad_id, right_pad
from stable_rl.policy.model_dir import checked_tokenizer


@dataclass
class TokenBatch:
    """Right-padded prompt + response rows; the loss is taken on response tokens."""

    input_ids: Tensor  # [M, L] long
    attention_mask: Tensor  # [M, L] bool
    response_mask: Tensor  # [M, L] bool

    @classmethod
    def pack(cls, rows: list[tuple[list[int], list[int]]], pad_token_id: int) -> "TokenBatch":
        return cls(*right_pad(rows, pad_token_id))


class SFTDataModule(L.LightningDataModule):
    """Supervised pairs (prompt, worked solution ending in the EOS token) from reasoning-gym.

    Args:
        prompts: the problems; every row a ``worked_solution`` exists for is used.
        template: how questions become prompt tokens (the same template the RL recipes use).
        batch_size: pairs per optimizer step.
        val_size: pairs held out (the last ones) for the validation loss.
        seed: seed of the shuffling (and of which problems get a direct answer).
        direct_fraction: fraction of problems whose target is the bare ``\\boxed{answer}``, no steps: a
            cold start that mixes two answer styles, one of which (working the steps) is far more
            accurate, leaves RL a behaviour to learn that transfers to new problems.
        unboxed_fraction: fraction of problems whose last line states the answer as ``The answer is N.``
            instead of ``\\boxed{N}``: a cold start with format errors (the verifier scores only boxed
            answers), the first thing RL on a real cold start usually fixes.
        by_place: place-value steps for arithmetic (``worked_solution(row, by_place=True)``): long solutions
            of easy steps, hundreds of tokens for a chain_sum of 6-8 terms.
        model_path: the model whose tokenizer encodes the pairs; the CLI links it from ``model.init_args.model_path``.
    """

    def __init__(
        self,
        prompts: ReasoningGymPrompts,
        template: PromptTemplate | None = None,
        batch_size: int = 64,
        val_size: int = 256,
        seed: int = 0,
        direct_fraction: float = 0.0,
        unboxed_fraction: float = 0.0,
        by_place: bool = False,
        model_path: str | None = None,
    ) -> None:
        super().__init__()
        for name, value in (("direct_fraction", direct_fraction), ("unboxed_fraction", unboxed_fraction)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"data.{name}={value} must be in [0, 1]")
        self.direct_fraction = direct_fraction
        self.unboxed_fraction = unboxed_fraction
        self.by_place = by_place
        self.prompts = prompts
        self.template = template if template is not None else PromptTemplate()
        self.batch_size = batch_size
        self.val_size = val_size
        self.seed = seed
        self.model_path = model_path
        self.pairs: list[tuple[list[int], list[int]]] = []

    def setup(self, stage: str) -> None:
        if self.pairs:
            return
        if self.model_path is None:
            raise ValueError(
                "SFTDataModule has no model_path (its tokenizer's): the stable-rl CLI links it from "
                "model.init_args.model_path; in code, pass the module's model_path to the data module"
            )
        self.tokenizer = checked_tokenizer(self.model_path)
        eos = self.tokenizer.eos_token_id
        style = random.Random(self.seed)
        for row in self.prompts.rows():
            solution = worked_solution(row, self.by_place)
            if solution is not None:
                if style.random() < self.direct_fraction:
                    solution = solution.splitlines()[-1]  # the \boxed{answer} line alone
                if self.unboxed_fraction and style.random() < self.unboxed_fraction:
                    *steps, _ = solution.splitlines()
                    solution = "\n".join([*steps, f"The answer is {row['answer']}."])
                response = self.tokenizer(solution, add_special_tokens=False)["input_ids"] + [eos]
                self.pairs.append((self.template.encode(self.tokenizer, row["question"]), response))
        if len(self.pairs) <= self.val_size:
            raise ValueError(
                f"{len(self.pairs)} worked solutions, not more than data.val_size={self.val_size}: "
                "raise data.prompts.init_args.size or lower val_size"
            )

    def _loader(self, pairs, shuffle: bool) -> DataLoader:
        return DataLoader(
            pairs,
            batch_size=self.batch_size,
            shuffle=shuffle,
            generator=torch.Generator().manual_seed(self.seed),
            collate_fn=lambda rows: TokenBatch.pack(rows, pad_id(self.tokenizer)),
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.pairs[: -self.val_size], shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.pairs[-self.val_size :], shuffle=False)
