"""The long task's scripts: run_cold_start.sh keeps the newest run's metrics.csv, install_on_gpu.sh installs in order
(python3 stubbed out: no model is made, nothing installed)."""

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_cold_start_script_copies_the_newest_runs_log(tmp_path):
    script = tmp_path / "experiments/long-task/run_cold_start.sh"
    script.parent.mkdir(parents=True)
    shutil.copy(ROOT / "experiments/long-task/run_cold_start.sh", script)
    stub = tmp_path / "bin/python3"
    stub.parent.mkdir()
    stub.write_text("#!/bin/sh\n")
    stub.chmod(0o755)
    for version in (2, 9, 10):
        run = tmp_path / f"runs/long/long_cold_start_sft_smollm2_moe/version_{version}"
        run.mkdir(parents=True)
        (run / "metrics.csv").write_text(f"version {version}\n")
    env = os.environ | {"PATH": f"{stub.parent}:{os.environ['PATH']}"}
    subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, check=True)
    assert (tmp_path / "experiments/long-task/cold_start/logs/metrics.csv").read_text() == "version 10\n"


def _install_tree(tmp_path: Path, wheel: bytes, expected_sha: str) -> dict:
    """A checkout with .gpu/ parts and a sig wheel, vLLM's appended wheel in W, and a python3 stub that
    records each call's arguments; the environment to run tools/gpu-offline/install_on_gpu.sh in."""
    script = tmp_path / "tools/gpu-offline/install_on_gpu.sh"
    script.parent.mkdir(parents=True)
    shutil.copy(ROOT / "tools/gpu-offline/install_on_gpu.sh", script)
    (tmp_path / ".gpu/parts").mkdir(parents=True)
    (tmp_path / ".gpu/parts/NAME").write_text("vllm-0.26.0-cp38-abi3-manylinux_2_31_x86_64.whl")
    (tmp_path / ".gpu/parts/SHA256").write_text(expected_sha + "\n")
    (tmp_path / ".gpu/sig").mkdir()
    (tmp_path / ".gpu/sig/math_verify-0.9.0-py3-none-any.whl").write_text("")
    (tmp_path / "w/wheels").mkdir(parents=True)
    (tmp_path / "w/vllm.whl").write_bytes(wheel)
    (tmp_path / "w/wheels/numba-0.61-none-any.whl").write_text("")
    stub = tmp_path / "bin/python3"
    stub.parent.mkdir()
    stub.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/calls\n')
    stub.chmod(0o755)
    return os.environ | {"PATH": f"{stub.parent}:{os.environ['PATH']}", "W": str(tmp_path / "w"), "SITE": "site"}


def test_the_gpu_install_puts_the_projects_wheels_in_before_and_apart_from_vllms(tmp_path):
    import hashlib

    wheel = b"the appended parts"
    env = _install_tree(tmp_path, wheel, hashlib.sha256(wheel).hexdigest())
    subprocess.run(["bash", "tools/gpu-offline/install_on_gpu.sh"], cwd=tmp_path, env=env, check=True)
    pip = "-m pip install -q --no-index --no-deps --no-compile --target site"
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[:2] == [
        f"{pip} .gpu/sig/math_verify-0.9.0-py3-none-any.whl",
        f"{pip} {tmp_path}/w/vllm-0.26.0-cp38-abi3-manylinux_2_31_x86_64.whl {tmp_path}/w/wheels/numba-0.61-none-any.whl",
    ]
    assert calls[2].startswith("-c import importlib.util") and len(calls) == 3


def test_the_gpu_install_refuses_a_wheel_whose_parts_do_not_add_up(tmp_path):
    env = _install_tree(tmp_path, b"a part short", "0" * 64)
    done = subprocess.run(
        ["bash", "tools/gpu-offline/install_on_gpu.sh"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 1
    assert "is not the parts' (a part missing, sent twice or out of order): send them again from p000" in done.stderr
    assert (tmp_path / "calls").read_text().splitlines() == [
        "-m pip install -q --no-index --no-deps --no-compile --target site .gpu/sig/math_verify-0.9.0-py3-none-any.whl"
    ]
