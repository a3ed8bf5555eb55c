"""Prompt sources: math problems with a gold answer, from reasoning-gym or local files."""

import csv
import json
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
        min_terms: fewest terms, for generators that have this setting (``basic_arithmetic``,
            ``chain_sum``); None keeps reasoning-gym's default.
        max_terms: most terms, likewise.
        min_digits: fewest digits per term, likewise.
        max_digits: most digits per term, likewise.
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
    """Problems from a local JSONL/JSON/CSV file (read as written: a number is kept as the text it was
    written as, so ``0.00001`` stays ``0.00001``) or parquet (via ``datasets``; a float column cannot be read
    exactly and is refused).

    Args:
        path: the file; its extension picks the reader.
        prompt_field: column holding the question.
        answer_field: column holding the gold answer.
    """

    SUFFIXES: ClassVar[tuple[str, ...]] = (".jsonl", ".json", ".csv", ".parquet")

    def __init__(self, path: str, prompt_field: str = "prompt", answer_field: str = "answer") -> None:
        self.path = path
        self.prompt_field = prompt_field
        self.answer_field = answer_field

    def load(self) -> list[Problem]:
        path = Path(self.path)
        if not path.is_file():
            raise FileNotFoundError(
                f"prompt file {path} not found: set data.prompts.init_args.path to an existing file"
            )
        if path.suffix not in self.SUFFIXES:
            raise ValueError(f"prompt file {path} has suffix {path.suffix!r}; use one of {sorted(self.SUFFIXES)}")
        rows = _read_rows(path) if path.stat().st_size else []
        if not rows:
            raise ValueError(
                f"prompt file {path} has no rows: give it at least one {self.prompt_field}/{self.answer_field}"
            )
        problems = []
        for index, row in enumerate(rows):
            missing = [f for f in (self.prompt_field, self.answer_field) if _blank(row.get(f))]
            if missing:
                raise ValueError(
                    f"row {index} of {path} has no {' or '.join(repr(f) for f in missing)}: every row needs a "
                    f"question in {self.prompt_field!r} and a gold answer in {self.answer_field!r} "
                    "(or set prompt_field/answer_field to the file's column names)"
                )
            where = f"row {index} of {path}"
            problems.append(Problem(_text(row[self.prompt_field], where), _text(row[self.answer_field], where)))
        return problems


def _read_rows(path: Path) -> list[dict]:
    """The file's rows, numbers in JSON as the text they were written as, CSV cells as written."""
    if path.suffix == ".jsonl":
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        return [json.loads(line, parse_float=str, parse_int=str) for line in lines]
    if path.suffix == ".json":
        rows = json.loads(path.read_text(), parse_float=str, parse_int=str)
        if not isinstance(rows, list):
            raise ValueError(f"prompt file {path} holds a JSON {type(rows).__name__}: give it a list of rows")
        return rows
    if path.suffix == ".csv":
        with open(path, newline="") as f:
            return list(csv.DictReader(f))
    import datasets

    return list(datasets.load_dataset("parquet", data_files=str(path), split="train"))


def _text(value, where: str) -> str:
    """A question or gold answer as text; an integer (parquet) is exact, other types cannot be one."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise ValueError(
        f"{where} has a {type(value).__name__} ({str(value)[:40]!r}) where a question or gold answer goes: "
        "write it as a string (a float cannot be read back exactly, a list or mapping is not one answer)"
    )


def _blank(value) -> bool:
    """No value, or text of whitespace alone (a prompt of spaces is as empty as no prompt)."""
    return value is None or (isinstance(value, str) and not value.strip())
