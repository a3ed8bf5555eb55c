"""Prompt sources: math problems with a gold answer, from reasoning-gym or local files."""

import csv
import io
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
        if generators == [] or size < 1:
            raise ValueError(
                f"ReasoningGymPrompts generators={generators}, size={size}: give at least one generator (None: "
                "basic_arithmetic) and at least 1 problem per generator"
            )
        self.generators = generators if generators is not None else ["basic_arithmetic"]
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
        if path.is_dir():
            raise IsADirectoryError(
                f"prompt file {path} is a directory: set data.prompts.init_args.path to a file in it "
                f"({', '.join(self.SUFFIXES)})"
            )
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
        _refuse_contradictions(problems, path)
        return problems


def _refuse_contradictions(problems: list[Problem], path: Path) -> None:
    """The same question with two gold answers would reward a response and its contradiction."""
    first: dict[str, int] = {}
    for row, problem in enumerate(problems):
        earlier = first.setdefault(problem.question, row)
        if problems[earlier].answer != problem.answer:
            raise ValueError(
                f"rows {earlier} and {row} of {path} ask the same question ({problem.question[:40]!r}) with different "
                f"gold answers ({problems[earlier].answer[:40]!r}, {problem.answer[:40]!r}): keep the right one"
            )


def _read_rows(path: Path) -> list[dict]:
    """The file's rows, numbers in JSON as the text they were written as, CSV cells as written."""
    if path.suffix == ".parquet":
        import datasets

        return list(datasets.load_dataset("parquet", data_files=str(path), split="train"))
    text = _utf8(path)
    if path.suffix == ".csv":
        reader = csv.DictReader(io.StringIO(text, newline=""))
        try:
            return list(reader)
        except csv.Error as error:  # e.g. a field beyond csv's limit: an unclosed quote runs on to the end
            raise ValueError(
                f"the row starting on line {reader.line_num + 1} of prompt file {path}: {error}: close its quotes (an "
                "unclosed quote runs a field on to the end of the file) or shorten the field"
            ) from None
    if path.suffix == ".jsonl":
        return [_json(line, number, path) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    rows = _json(text, 1, path)
    if not isinstance(rows, list):
        raise ValueError(f"prompt file {path} holds a JSON {type(rows).__name__}: give it a list of rows")
    return rows


def _utf8(path: Path) -> str:
    """The file's text (a leading byte-order mark dropped); a file in another encoding is named with its line."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise ValueError(
            f"prompt file {path} is not UTF-8 (byte {data[error.start]:#x} on line {line}): save it as UTF-8, e.g. "
            f"iconv -f latin1 -t utf-8 {path} > utf8{path.suffix}"
        ) from None


def _json(text: str, first_line: int, path: Path):
    """``text`` (from line ``first_line`` of ``path``) as JSON, numbers as the text they were written as."""
    try:
        return json.loads(text, parse_float=str, parse_int=str)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"line {first_line + error.lineno - 1} of prompt file {path} is not valid JSON ({error.msg}, column "
            f"{error.colno}): fix that line"
        ) from None
    except RecursionError:
        raise ValueError(
            f"prompt file {path} from line {first_line} nests its JSON deeper than the reader can follow: a row is "
            'one object {"prompt": ..., "answer": ...} of text values; fix the nesting'
        ) from None


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
