"""Settings that were renamed, named with their new name when a config file or the command line still uses
the old one (jsonargparse would only say that the key is unknown)."""

from pathlib import Path

import yaml

RENAMED = {  # old dotted key -> new one
    "data.init_args.benchmarks": "data.init_args.eval_sets",  # "benchmarks" are the performance scripts
}


def _dotted_keys(tree, prefix: str = ""):
    if isinstance(tree, dict):
        for key, value in tree.items():
            dotted = f"{prefix}{key}"
            yield dotted
            yield from _dotted_keys(value, f"{dotted}.")


def renamed_setting(args: list[str], configs: list[Path]) -> str | None:
    """The first renamed setting in ``configs`` or ``args`` and its new name, or None."""
    for path in configs:
        tree = yaml.safe_load(path.read_text())
        for key in _dotted_keys(tree):
            if key in RENAMED:
                return f"{path}: {key} is now {RENAMED[key]}: rename it there"
    for arg in args:
        key = arg.removeprefix("--").split("=", 1)[0]
        if key in RENAMED:
            return f"--{key} is now --{RENAMED[key]}"
    return None
