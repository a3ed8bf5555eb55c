"""YAML syntax errors of ``--config`` files named with the file and line (jsonargparse says only
``line 3`` of ``<unicode string>``, whichever of the stacked configs it was)."""

from collections.abc import Iterator
from pathlib import Path

import yaml


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
    """What is wrong with the YAML of ``path``, on which line, and the fix; None if it parses."""
    text = path.read_text()
    try:
        yaml.safe_load(text)
    except yaml.MarkedYAMLError as error:
        mark, start = error.problem_mark, error.context_mark
        opened = f" ({error.context} opened on line {start.line + 1})" if start and start.line != mark.line else ""
        tab = " (YAML indents with spaces, never tabs)" if "'\\t'" in error.problem else ""
        return (
            f"config file {path} is not valid YAML: line {mark.line + 1}, column {mark.column + 1}: {error.problem}"
            f"{opened}{tab}: fix the file there"
        )
    return None
