"""A metrics.csv rewritten in its shortest exact form holds the same float32 numbers (stable_rl.analysis.compact_log)."""

import lzma

import numpy as np

from stable_rl.analysis.compact_log import compact_csv, compact_file, shortest


def test_a_float32_value_is_written_as_the_shortest_decimal_of_the_same_float32():
    assert shortest("0.2598296105861664") == "0.2598296"
    assert np.float32(float("0.2598296")) == np.float32(0.2598296105861664)
    assert shortest("4.740861641039373e-06") == "4.7408616e-06"
    assert shortest("-3.35015659658211e-09") == "-3.3501566e-09"
    assert shortest("295.0") == "295" and shortest("0.1875") == "0.1875" and shortest("0.0") == "0"


def test_values_that_are_not_finite_float32_numbers_are_kept_as_written():
    """0.1 is a float64 (its float32 is 0.100000001490116...), 17 an integer, the rest text or non-finite."""
    for value in ["0.1", "17", "", "nan", "inf", "-inf", "heldout", "2026-11-29"]:
        assert shortest(value) == value


def test_a_csv_keeps_its_header_empty_cells_and_line_ends():
    text = "step,train/loss,val/x\r\n0,0.2598296105861664,\r\n1,,0.1\r\n"
    assert compact_csv(text) == "step,train/loss,val/x\r\n0,0.2598296,\r\n1,,0.1\r\n"
    assert compact_csv("a,b\n3,0.5\n") == "a,b\n3,0.5\n"


def test_an_xz_log_is_rewritten_in_place_and_reads_as_the_same_float32_numbers(tmp_path):
    values = np.random.default_rng(0).standard_normal(50).astype(np.float32)
    text = "step,v\r\n" + "".join(f"{i},{float(v)!r}\r\n" for i, v in enumerate(values))
    path = tmp_path / "metrics.csv.xz"
    path.write_bytes(lzma.compress(text.encode()))
    before, after = compact_file(path)
    rows = lzma.decompress(path.read_bytes()).decode().splitlines()[1:]
    assert [np.float32(float(row.split(",")[1])) for row in rows] == list(values)
    assert before == len(lzma.compress(text.encode())) and after == path.stat().st_size < before


def test_a_plain_log_is_written_into_an_xz_file_beside_it(tmp_path):
    (tmp_path / "metrics.csv").write_text("step,v\n0,0.2598296105861664\n")
    compact_file(tmp_path / "metrics.csv", into=tmp_path / "kept.csv.xz")
    assert lzma.decompress((tmp_path / "kept.csv.xz").read_bytes()) == b"step,v\n0,0.2598296\n"
    assert (tmp_path / "metrics.csv").read_text() == "step,v\n0,0.2598296105861664\n"
