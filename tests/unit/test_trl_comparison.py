"""The stable-rl vs TRL benchmark script (benchmarks/trl_comparison.py): per-step aggregation, the per-round
ratios' median and range, and its tables, on hand-worked numbers."""

import importlib


def _trl_comparison():
    return importlib.import_module("benchmarks.trl_comparison")


def _step(seconds, rollout, mean, longest, real, padded, reward=0.5, loss=0.0, grad_norm=1.0):
    return dict(
        seconds=seconds,
        rollout=rollout,
        response_mean=mean,
        response_max=longest,
        real_tokens=real,
        padded_tokens=padded,
        forwards=2,
        reward=reward,
        loss=loss,
        grad_norm=grad_norm,
    )


def test_trl_comparison_summary_leaves_out_the_untimed_first_step():
    steps = [
        _step(None, 9.0, 99.0, 500, 10**6, 10**6, 1.0, 5.0, 7.0),
        _step(2.0, 0.5, 10.0, 30, 400, 600, 0.25, 0.5, 1.0),
        _step(4.0, 1.5, 20.0, 40, 800, 1200, 0.75, -1.5, 3.0),
    ]
    summary = _trl_comparison().summarize(steps)
    # tokens/s: (400 + 800) real and (600 + 1200) padded tokens over 2 + 4 s
    assert summary == {
        "steps": 2,
        "seconds": 3.0,
        "response_max": 40,
        "real_per_s": 200.0,
        "padded_per_s": 300.0,
        "rollout": 1.0,
        "response_mean": 15.0,
        "real_tokens": 600.0,
        "padded_tokens": 900.0,
        "forwards": 2.0,
        "reward": 0.5,
        "loss": -0.5,
        "grad_norm": 2.0,
    }


def test_trl_comparison_ratio_of_paired_rounds():
    # rounds: TRL 6, 9, 5 s against stable-rl 3, 3, 4 s -> 2.0, 3.0, 1.25 per round (not 20 / 10 = 2.0 overall)
    ratio = _trl_comparison().ratio_summary([6.0, 9.0, 5.0], [3.0, 3.0, 4.0])
    assert ratio == {"median": 2.0, "low": 1.25, "high": 3.0, "rounds": [2.0, 3.0, 1.25]}


def test_trl_comparison_tables():
    bench = _trl_comparison()
    first = _step(None, 1.0, 1.0, 1, 1, 1)
    ours = [bench.summarize([first, _step(s, 0.5, 16.0, 30, 2000, 2400)]) for s in (2.0, 4.0, 2.5)]
    trl = [bench.summarize([first, _step(s, 3.0, 20.0, 40, 2000, 3000)]) for s in (5.0, 6.0, 10.0)]
    results = {"quickstart": {"setting": "16 x 8, <= 64 tokens", "stable-rl": ours, "trl": trl, "trl-cb": []}}
    lines = bench.tables(results, {("quickstart", "trl-cb"): "ValueError: no"}).splitlines()
    assert lines[2] == (
        "| quickstart: 16 x 8, <= 64 tokens | stable-rl | 3 x 1 | 2.50 (2.00-4.00) | 0.50 | 16.0 / 30 "
        "| 2000 | 2400 | 2 | 800 | 960 |"
    )
    assert lines[3].startswith(
        "| quickstart: 16 x 8, <= 64 tokens | trl | 3 x 1 | 6.00 (5.00-10.00) | 3.00 | 20.0 / 40 "
    )
    # per round: 5 / 2, 6 / 4, 10 / 2.5
    assert "| quickstart | trl / stable-rl | 2.50x | 1.50-4.00x | 2.50, 1.50, 4.00 |" in lines
    assert lines[-1] == "Note: trl-cb failed on quickstart, no row: ValueError: no"
