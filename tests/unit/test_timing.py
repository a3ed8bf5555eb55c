"""timed(): phases accumulate their wall time."""

import time

from stable_rl.timing import timed


def test_a_phase_accumulates_every_block():
    times = {"other": 1.0}
    for _ in range(2):
        with timed(times, "sleep"):
            time.sleep(0.05)
    assert times["other"] == 1.0 and 0.1 <= times["sleep"] < 5.0
