"""YAML that cannot be read as a config, named with the ``--config`` file before anything walks it: a syntax
error (jsonargparse says only ``line 3`` of ``<unicode string>``, whichever of the stacked configs it was), and
aliases nested in aliases (a "billion laughs": a few lines that expand to billions of values, which every
walk of the settings would spin through)."""

import math
from collections.abc import Iterator
from pathlib import Path

import yaml

MAX_VALUES = 100_000  # values a config may expand to through its aliases; a recipe holds a few hundred


def config_files(args: list[str]) -> Iterator[Path]:
    """The existing files given to ``--config`` / ``-c`` in ``args``."""
    for i, arg in enumerate(args):
        if arg.startswith("--config="):
            path = Path(arg.removeprefix("--config="))
        elif arg in ("--config", "-c") and i + 1 < len(args):
            path = Path(args[i + 1])
        else:
            continue
        if path.is_file():
            yield path


def syntax_error(path: Path) -> str | None:
    """What is wrong with the YAML of ``path``, on which line, and the fix; None if it parses and expands to at
    most ``MAX_VALUES`` values."""
    text = path.read_text()
    try:
        tree = yaml.safe_load(text)
    except yaml.MarkedYAMLError as error:
        mark, start = error.problem_mark, error.context_mark
        opened = f" ({error.context} opened on line {start.line + 1})" if start and start.line != mark.line else ""
        tab = " (YAML indents with spaces, never tabs)" if "'\\t'" in error.problem else ""
        return (
            f"config file {path} is not valid YAML: line {mark.line + 1}, column {mark.column + 1}: {error.problem}"
            f"{opened}{tab}: fix the file there"
        )
    values = expanded_values(tree, {})
    if values > MAX_VALUES:
        size = "without end (an alias inside its own anchor)" if values == math.inf else f"to {values:,} values"
        return (
            f"config file {path} expands {size} through its YAML aliases (*name) nested in anchors (&name), a "
            f"'billion laughs'; a config holds at most {MAX_VALUES:,}: write the settings out, or nest fewer aliases"
        )
    return None


def expanded_values(tree, sizes: dict[int, float]) -> float:
    """The number of values in ``tree`` with every alias written out, in time linear in the file: each list or
    mapping is counted once (``sizes``, by id: an alias is the same object again); infinite for a tree that
    contains itself."""
    if not isinstance(tree, dict | list):
        return 1
    if id(tree) not in sizes:
        sizes[id(tree)] = math.inf  # while in progress: met again below itself, the tree contains itself
        sizes[id(tree)] = 1 + sum(
            expanded_values(child, sizes) for child in (tree.values() if isinstance(tree, dict) else tree)
        )
    return sizes[id(tree)]
