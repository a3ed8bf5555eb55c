"""A run's ``metrics.csv`` thinned for an archive of hundreds of runs: the columns a study's verdict reads kept at
every row, the others at every ``every``-th step and at validations, timings but ``time/step`` dropped.

Each float column costs about 4 KB per 900-row run under xz, most of them descriptive (log-ratio quantiles,
KL, timings); the stability atlas's ~600 runs at 47 columns would be ~60 MB of logs. Its endpoints (the collapse
rule's reward, entropy and skipped updates; held-out validations) stay whole, so every verdict is recomputable
from the thinned log (``experiments/atlas/PROTOCOL.md`` Part 2c).

    python -m stable_rl.analysis.thin_log --keep train/reward,train/entropy --every 10 runs/x/version_0/metrics.csv
"""

import argparse
import csv
import io
from collections.abc import Iterable
from pathlib import Path


def thin_csv(text: str, keep: Iterable[str], every: int) -> str:
    """``text`` (a metrics.csv) with the columns ``keep``, ``step`` and ``epoch`` at every row, any row with a
    validation (a ``val/`` value) whole, the other rows' other cells emptied unless the step is a multiple of
    ``every``, and the ``time/`` columns but ``time/step`` left out."""
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    if not rows:
        return text
    whole = {"step", "epoch", *keep}
    columns = [c for c in rows[0] if not c.startswith("time/") or c == "time/step"]
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        kept = any(row[c] for c in columns if c.startswith("val/")) or (row["step"] and int(row["step"]) % every == 0)
        writer.writerow(row if kept else {c: row[c] if c in whole else "" for c in columns})
    return out.getvalue()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", nargs="+", type=Path, help="metrics.csv files, rewritten in place")
    parser.add_argument("--keep", required=True, help="columns kept at every row, comma-separated")
    parser.add_argument("--every", type=int, default=10, help="the other columns at every N-th step")
    args = parser.parse_args(argv)
    for path in args.logs:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(thin_csv(path.read_text(), args.keep.split(","), args.every))
        tmp.replace(path)


if __name__ == "__main__":
    main()
