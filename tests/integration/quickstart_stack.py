"""The main job's configs, for the tests that launch it: ``recipes/quickstart.yaml`` is an overlay on
``recipes/minirl.yaml``."""

import sys

CONFIGS = ["--config=recipes/minirl.yaml", "--config=recipes/quickstart.yaml"]
FIT = [sys.executable, "-m", "stable_rl.cli", "fit", *CONFIGS]  # the console script, in a process of its own
