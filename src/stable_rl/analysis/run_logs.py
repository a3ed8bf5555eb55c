"""The log reader of finished runs: each run's metrics from its Lightning CSV log (alone, compressed, or packed
with others in a study's archive), and the runs' labels."""

import csv
import gzip
import io
import lzma
import tarfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO

COMPRESSED: dict[str, Callable[..., IO[str]]] = {".gz": gzip.open, ".xz": lzma.open}  # committed logs, compressed


def series_of(rows: Iterable[dict[str, str]], source: str) -> dict[str, list[tuple[int, float]]]:
    """metric -> [(step, value)] from a CSVLogger log's rows (the header is line 1 of ``source``, named in errors)."""
    series: dict[str, list[tuple[int, float]]] = {}
    for line, row in enumerate(rows, start=2):
        for name, value in row.items():
            if name not in ("step", "epoch") and value not in ("", None):
                try:
                    series.setdefault(name, []).append((int(float(row["step"])), float(value)))
                except (TypeError, ValueError):
                    raise ValueError(
                        f"{source}, line {line}, column {name!r}: {value!r} (step {row['step']!r}) is not a number: "
                        "the log is malformed; fix or remove that line"
                    ) from None
    return series


def read_run(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """metric -> [(step, value)] from ``run_dir/metrics.csv`` (a CSVLogger version directory), or from
    ``metrics.csv.gz`` or ``metrics.csv.xz`` where only that is there (a committed log, compressed)."""
    candidates = [run_dir / "metrics.csv", *(run_dir / f"metrics.csv{suffix}" for suffix in COMPRESSED)]
    path = next((c for c in candidates if c.is_file()), candidates[0])
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: pass CSVLogger version directories (runs/<name>/version_<n>)")
    with COMPRESSED.get(path.suffix, open)(path, "rt") as f:
        reader = csv.DictReader(f)
        if not reader.fieldnames or "step" not in reader.fieldnames:
            raise ValueError(
                f"{path}: no header with a 'step' column (an empty or cut log?): pass a CSVLogger's metrics.csv"
            )
        series = series_of(reader, str(path))
    if not series:
        raise ValueError(f"{path}: the log has no values (a run that logged nothing): nothing to report")
    return series


def read_archive(archive: Path, log: str = "metrics.csv") -> dict[str, list[dict[str, str]]]:
    """Each run's ``log`` rows (metrics.csv, or heldout_outcomes.csv), by run name (the folder above ``version_N``),
    from a ``.tar.xz`` of run folders (``experiments/atlas/pack_logs.sh``)."""
    runs: dict[str, list[dict[str, str]]] = {}
    paths: dict[str, str] = {}
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            if member.name.endswith(f"/{log}") and (f := tar.extractfile(member)) is not None:
                name = Path(member.name).parts[-3]
                if name in paths:
                    raise ValueError(
                        f"{archive}: run {name} is in it twice ({paths[name]}, {member.name}): pack each wave's own "
                        "folder into its own archive (pack_logs.sh runs/atlas/<wave> ...), one version per run"
                    )
                paths[name] = member.name
                runs[name] = list(csv.DictReader(io.TextIOWrapper(f, encoding="utf-8")))
    return runs


def archived_copies(archives: list[Path]) -> Iterator[tuple[Path, str, list[dict[str, str]]]]:
    """(archive, run name, metrics.csv rows) of every run in ``archives``, in their order; refuses two archives
    holding the same copy of a run (the same rows): a wave's folder packed twice would count a cut run as cut twice."""
    seen: dict[tuple[str, str], Path] = {}
    for archive in archives:
        for name, rows in read_archive(archive).items():
            key = (name, repr(rows))
            if key in seen:
                raise ValueError(
                    f"{archive} and {seen[key]} hold the same copy of run {name}: keep one (each archive packs one "
                    "wave's own folder, runs/atlas/<wave>)"
                )
            seen[key] = archive
            yield archive, name, rows


def run_labels(run_dirs: list[Path]) -> list[str]:
    """``<experiment>/<version>`` per CSVLogger directory; the whole path where that is ambiguous."""
    short = [f"{d.parent.name}/{d.name}" for d in run_dirs]
    return [s if short.count(s) == 1 else str(d) for s, d in zip(short, run_dirs, strict=True)]
