"""A run's ``metrics.csv`` in its shortest exact form, for committing beside a study.

Lightning logs every value as a float32 tensor and ``CSVLogger`` writes it as the 17 digits of its float64
widening (``0.2598296105861664``); the shortest decimal that reads back as the same float32 (``0.2598296``) is
the same number, and a log written so compresses to about half under xz. A value that is not a float32 (an
integer column, text, a float64 written by another tool) is kept as written, so the rewrite loses nothing.

    python -m stable_rl.analysis.compact_log runs/x/version_0/metrics.csv logs/y/metrics.csv.xz   # in place
    python -m stable_rl.analysis.compact_log runs/x/version_0/metrics.csv --into logs/x/metrics.csv.xz
"""

import argparse
import csv
import io
import lzma
import math
from pathlib import Path

import numpy as np


def shortest(value: str) -> str:
    """``value`` as the shortest decimal of the same float32, or as written where it is not a finite float32."""
    try:
        number = float(value)
    except ValueError:
        return value
    single = np.float32(number)
    if not math.isfinite(number) or float(single) != number or value.lstrip("-").isdigit():
        return value
    text = np.format_float_positional(single, unique=True, trim="-")
    if 1e-4 > abs(number) > 0 or abs(number) >= 1e16:
        text = np.format_float_scientific(single, unique=True, trim="-")
    return text if len(text) < len(value) else value


def compact_csv(text: str) -> str:
    """Every cell of a CSV text through ``shortest``; the header, empty cells, row order and line ends as they were."""
    rows = list(csv.reader(io.StringIO(text, newline="")))
    out = io.StringIO(newline="")
    writer = csv.writer(out, lineterminator="\r\n" if "\r\n" in text[: text.find("\n") + 1] else "\n")
    writer.writerows([rows[0], *([shortest(cell) for cell in row] for row in rows[1:])] if rows else [])
    return out.getvalue()


def compact_file(path: Path, into: Path | None = None) -> tuple[int, int]:
    """Write ``path`` compacted into ``into`` (default: in place); a ``.xz`` name is read or written in xz at its
    strongest. Returns the sizes before and after."""
    into = into or path
    raw = path.read_bytes()
    text = compact_csv((lzma.decompress(raw) if path.suffix == ".xz" else raw).decode("utf-8"))
    data = text.encode("utf-8")
    new = lzma.compress(data, preset=9 | lzma.PRESET_EXTREME) if into.suffix == ".xz" else data
    tmp = into.with_name(into.name + ".tmp")
    tmp.write_bytes(new)
    tmp.replace(into)
    return len(raw), len(new)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path, help="metrics.csv or metrics.csv.xz files, rewritten in place")
    parser.add_argument("--into", type=Path, help="write the one path given here instead (.xz: compressed)")
    args = parser.parse_args(argv)
    if args.into and len(args.paths) > 1:
        parser.error(f"--into takes one path, not {len(args.paths)}")
    for path in args.paths:
        before, after = compact_file(path, args.into)
        print(f"{path}: {before:,} -> {after:,} bytes")


if __name__ == "__main__":
    main()
