"""stable-rl-report on small synthetic CSV logs: the figures per family and the peak/final table."""

import gzip
import lzma
import re

import pytest

from stable_rl.analysis.report import main, report
from stable_rl.analysis.run_logs import read_run

HEADER = "epoch,step,train/reward,train/kl,val/heldout/avg@4\n"


def write_run(root, name, rows):
    run = root / name / "version_0"
    run.mkdir(parents=True)
    (run / "metrics.csv").write_text(HEADER + "".join(rows))
    return run


def test_report_writes_figures_and_the_peak_final_table(tmp_path):
    a = write_run(
        tmp_path, "minirl", ["0,0,0.5,0.001,\n", "0,0,,,0.40\n", "0,1,0.7,0.002,\n", "0,1,,,0.55\n", "0,2,0.6,0.001,\n"]
    )
    b = write_run(tmp_path, "no_is", ["0,0,0.5,0.003,\n", "0,1,0.2,0.004,\n"])
    plotted = report([a, b], tmp_path / "out")
    assert plotted == {"reward": ["train/reward"], "heldout": ["val/heldout/avg@4"], "kl": ["train/kl"]}
    for family in plotted:
        assert (tmp_path / "out" / f"{family}.png").read_bytes()[:4] == b"\x89PNG"
    text = (tmp_path / "out" / "report.md").read_text()
    assert "| train/reward | minirl/version_0 | 0.7 | 1 | 0.6 | 2 |" in text
    assert "| train/reward | no_is/version_0 | 0.5 | 0 | 0.2 | 1 |" in text
    assert "| val/heldout/avg@4 | minirl/version_0 | 0.55 | 1 | 0.55 | 1 |" in text
    assert "no_is/version_0 | 0.004 |" in text and "val/heldout/avg@4 | no_is" not in text


def test_a_compressed_log_reads_as_the_csv_it_holds(tmp_path):
    """A committed log kept as ``metrics.csv.gz`` or ``metrics.csv.xz`` gives the same series as its
    ``metrics.csv``; where both are there, the plain file is read."""
    plain = write_run(tmp_path, "plain", ["0,0,0.5,0.001,\n", "0,0,,,0.40\n", "0,1,0.7,0.002,\n"])
    packed = tmp_path / "packed" / "version_0"
    packed.mkdir(parents=True)
    (packed / "metrics.csv.gz").write_bytes(gzip.compress((plain / "metrics.csv").read_bytes()))
    xz = tmp_path / "xz" / "version_0"
    xz.mkdir(parents=True)
    (xz / "metrics.csv.xz").write_bytes(lzma.compress((plain / "metrics.csv").read_bytes()))
    assert (
        read_run(packed)
        == read_run(xz)
        == read_run(plain)
        == {
            "train/reward": [(0, 0.5), (1, 0.7)],
            "train/kl": [(0, 0.001), (1, 0.002)],
            "val/heldout/avg@4": [(0, 0.40)],
        }
    )
    (packed / "metrics.csv").write_text(HEADER + "0,3,0.9,,\n")
    assert read_run(packed) == {"train/reward": [(3, 0.9)]}


def test_a_folder_without_metrics_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"metrics\.csv not found: pass CSVLogger version directories"):
        main([str(tmp_path), "--out", str(tmp_path / "out")])


def test_runs_of_the_same_name_in_two_folders_keep_apart(tmp_path):
    a = write_run(tmp_path / "first", "minirl", ["0,0,0.5,0.001,\n"])
    b = write_run(tmp_path / "second", "minirl", ["0,0,0.9,0.001,\n"])
    report([a, b], tmp_path / "out")
    text = (tmp_path / "out" / "report.md").read_text()
    assert f"| train/reward | {a} | 0.5 |" in text and f"| train/reward | {b} | 0.9 |" in text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "metrics.csv: no header with a 'step' column (an empty or cut log?)"),
        (HEADER, "metrics.csv: the log has no values (a run that logged nothing): nothing to report"),
        (
            HEADER + "0,0,0.5,,\n0,1,0.x,,\n",
            "metrics.csv, line 3, column 'train/reward': '0.x' (step '1') is not a number",
        ),
        (HEADER + "0,,0.5,,\n", "metrics.csv, line 2, column 'train/reward': '0.5' (step '') is not a number"),
    ],
)
def test_a_malformed_or_empty_log_is_named_with_its_line_and_column(tmp_path, text, message):
    run = tmp_path / "run" / "version_0"
    run.mkdir(parents=True)
    (run / "metrics.csv").write_text(text)
    with pytest.raises(ValueError, match=re.escape(f"{run}/{message}")):
        read_run(run)
