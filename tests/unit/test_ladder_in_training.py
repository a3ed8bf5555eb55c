"""benchmarks/ladder_in_training.py: the rungs that finished are kept and tabled when another rung fails
(a rung that fails, such as the FP8 KV-cache rung on a vLLM that lacks it, must not take the other rungs' results
with it)."""

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _ladder():
    return importlib.import_module("benchmarks.ladder_in_training")


def test_a_failed_rung_keeps_the_others_logs_and_table_and_fails_the_command(tmp_path, monkeypatch, capsys):
    ladder = _ladder()
    monkeypatch.chdir(tmp_path)
    names = ["minirl_r3-s0", "fp8-s0", "fp8+fp8_kv-s0"]  # the sweep's names; fp8_kv-s0 failed

    def sweep(command, **kwargs):
        assert "check" not in kwargs or not kwargs["check"]
        for i, name in enumerate(names):
            version = Path("runs/ladder_in_training", name, "version_0")
            version.mkdir(parents=True)
            (version / "metrics.csv").write_text(f"step,train/kl_k3\n0,{i + 1}\n1,{i + 1}\n")
        return subprocess.CompletedProcess(command, 1)

    monkeypatch.setattr(ladder.subprocess, "run", sweep)
    monkeypatch.setattr(sys, "argv", ["ladder_in_training.py", "--gpu", "--steps", "2", "--out", str(tmp_path / "out")])
    with pytest.raises(SystemExit, match="exit code 1"):
        ladder.main()
    assert sorted(p.parent.name for p in (tmp_path / "out").glob("*/version_0")) == sorted(names)
    table = capsys.readouterr().out
    assert "| fp8-s0 | 2 | - | - | - | - |" in table and "| fp8+fp8_kv-s0 | 3 | - | - | - | - |" in table


def test_a_whole_sweep_exits_cleanly(tmp_path, monkeypatch):
    ladder = _ladder()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(ladder.subprocess, "run", lambda command, **kwargs: subprocess.CompletedProcess(command, 0))
    assert ladder.run(2, tmp_path / "out", gpu=True) == 0
