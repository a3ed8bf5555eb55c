"""Prompt sources: math problems with a gold answer, from reasoning-gym or local files."""

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar


@dataclass(frozen=True)
class Problem:
    """A math question and its gold final answer (compared by math-verify)."""

    question: str
    answer: str


class PromptSource(ABC):
    """Where the training problems come from."""

    @abstractmethod
    def load(self) -> list[Problem]:
        """All problems, in a fixed order."""


class ReasoningGymPrompts(PromptSource):
    """Procedurally generated problems with computed answers (reasoning-gym), seeded.

    Args:
        generators: reasoning-gym dataset names, e.g. ``basic_arithmetic``, ``chain_sum``, ``gsm_symbolic``.
        size: problems per generator.
        seed: generator seed (the same seed gives the same problems). reasoning-gym derives problem i
            from seed + i, so sources whose seed ranges [seed, seed + size) overlap share problems:
            keep training, cold-start and held-out seeds far apart (the recipes use 1, 100000, 1000000).
        min_terms, max_terms, min_digits, max_digits: difficulty, for generators that have these
            settings (``basic_arithmetic``, ``chain_sum``); None keeps reasoning-gym's default.
    """

    def __init__(
        self,
        generators: list[str] | None = None,
        size: int = 512,
        seed: int = 0,
        min_terms: int | None = None,
        max_terms: int | None = None,
        min_digits: int | None = None,
        max_digits: int | None = None,
    ) -> None:
        self.generators = generators or ["basic_arithmetic"]
        self.size = size
        self.seed = seed
        difficulty = dict(min_terms=min_terms, max_terms=max_terms, min_digits=min_digits, max_digits=max_digits)
        self.difficulty = {k: v for k, v in difficulty.items() if v is not None}

    def rows(self) -> list[dict]:
        """reasoning-gym's rows (question, answer, metadata), generator after generator."""
        import reasoning_gym

        rows = []
        for name in self.generators:
            try:
                rows += list(reasoning_gym.create_dataset(name, size=self.size, seed=self.seed, **self.difficulty))
            except Exception as error:  # reasoning-gym raises bare errors for unknown names and settings
                raise ValueError(
                    f"reasoning-gym generator {name!r} with settings {self.difficulty} failed: {error}"
                ) from error
        return rows

    def load(self) -> list[Problem]:
        return [Problem(row["question"], str(row["answer"])) for row in self.rows()]


class FilePrompts(PromptSource):
    """Problems from a local JSONL/JSON/parquet/CSV file via ``datasets``.

    Args:
        path: the file; its extension picks the loader.
        prompt_field: column holding the question.
        answer_field: column holding the gold answer.
    """

    LOADERS: ClassVar[dict[str, str]] = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}

    def __init__(self, path: str, prompt_field: str = "prompt", answer_field: str = "answer") -> None:
        self.path = path
        self.prompt_field = prompt_field
        self.answer_field = answer_field

    def load(self) -> list[Problem]:
        import datasets

        path = Path(self.path)
        if not path.is_file():
            raise FileNotFoundError(
                f"prompt file {path} not found: set data.prompts.init_args.path to an existing file"
            )
        loader = self.LOADERS.get(path.suffix)
        if loader is None:
            raise ValueError(f"prompt file {path} has suffix {path.suffix!r}; use one of {sorted(self.LOADERS)}")
        empty = f"prompt file {path} has no rows: give it at least one {self.prompt_field}/{self.answer_field}"
        if path.stat().st_size == 0:  # datasets fails on an empty file with a bare StopIteration
            raise ValueError(empty)
        rows = datasets.load_dataset(loader, data_files=str(path), split="train")
        if len(rows) == 0:
            raise ValueError(empty)
        problems = []
        for index, row in enumerate(rows):
            missing = [f for f in (self.prompt_field, self.answer_field) if row.get(f) in (None, "")]
            if missing:
                raise ValueError(
                    f"row {index} of {path} has no {' or '.join(repr(f) for f in missing)}: every row needs a "
                    f"question in {self.prompt_field!r} and a gold answer in {self.answer_field!r} "
                    "(or set prompt_field/answer_field to the file's column names)"
                )
            problems.append(Problem(str(row[self.prompt_field]), str(row[self.answer_field])))
        return problems
