"""stable-rl-sweep: the runs it plans, their commands and log names."""

import shlex
import sys
from types import SimpleNamespace

import pytest

from stable_rl.cli.sweep import main, plan


def test_plan_is_every_recipe_stack_with_every_seed():
    runs = plan(
        ["recipes/minirl.yaml", "recipes/minirl.yaml recipes/paper/minirl_no_is.yaml"], [0, 3], "out", ["--x=1"]
    )
    assert [run.name for run in runs] == ["minirl-s0", "minirl-s3", "minirl_no_is-s0", "minirl_no_is-s3"]

    assert runs[3].command() == [
        sys.executable,
        "-m",
        "stable_rl.cli",
        "fit",
        "--config=recipes/minirl.yaml",
        "--config=recipes/paper/minirl_no_is.yaml",
        "--seed_everything=3",
        "--trainer.logger.init_args.save_dir=out",
        "--trainer.logger.init_args.name=minirl_no_is-s3",
        "--x=1",
    ]


def test_orthogonal_overlays_name_a_run_together():
    stack = "recipes/minirl.yaml recipes/paper/fp8.yaml recipes/paper/minirl_no_is.yaml recipes/paper/r3.yaml"
    assert plan([stack], [2], "out", [])[0].name == "fp8+minirl_no_is+r3-s2"


def test_dry_run_prints_the_commands(capsys):
    main(
        [
            "--recipes",
            "recipes/minirl.yaml recipes/quickstart.yaml",
            "--seeds",
            "1",
            "--dry-run",
            "--",
            "--trainer.max_steps=5",
        ]
    )
    line = capsys.readouterr().out.strip()
    assert shlex.split(line)[-4:] == [
        "--seed_everything=1",
        "--trainer.logger.init_args.save_dir=runs/sweep",
        "--trainer.logger.init_args.name=quickstart-s1",
        "--trainer.max_steps=5",
    ]


def test_two_runs_of_one_name_are_refused_before_any_runs():
    """recipes/frontier/exact.yaml and recipes/long/exact.yaml are both named ``exact``: one folder, one run listed
    twice; so is a stack given twice."""
    message = (
        "two runs would be named exact-s0 (logged into out/exact-s0): 'recipes/minirl.yaml recipes/frontier/exact.yaml' "
        "and 'recipes/minirl.yaml recipes/long/exact.yaml'. A run is named by its overlays' file names: give each "
        "stack once, rename one overlay, or sweep them separately with their own --save-dir"
    )
    stacks = ["recipes/minirl.yaml recipes/frontier/exact.yaml", "recipes/minirl.yaml recipes/long/exact.yaml"]
    with pytest.raises(ValueError) as refused:
        plan(stacks, [0, 1], "out", [])
    assert str(refused.value) == message
    with pytest.raises(ValueError, match="two runs would be named minirl-s0"):
        plan(["recipes/minirl.yaml", "recipes/minirl.yaml"], [0], "out", [])
    assert [run.name for run in plan(stacks[:1], [0, 1], "out", [])] == ["exact-s0", "exact-s1"]


def test_a_missing_recipe_is_named():
    with pytest.raises(FileNotFoundError, match=r"\['recipes/nope.yaml'\] not found"):
        plan(["recipes/minirl.yaml recipes/nope.yaml"], [0], "out", [])


@pytest.mark.parametrize(("parallel", "per_gpu"), [(2, 1), (4, 2), (2, 2), (None, 3)])
def test_parallel_runs_go_to_the_least_loaded_gpu(monkeypatch, parallel, per_gpu):
    """Eight runs of uneven length, ``parallel`` at a time (unset: as many as the GPUs hold) on two GPUs (the
    parent sees devices 5 and 7): the first wave is spread evenly (nothing ends before all of it has started), and no GPU ever
    runs more than ``per_gpu``. (A thread's entry into the fake run lags the sweep's choice, so the
    check counts from the runs' own entries, never from another thread's view.)"""
    import threading
    import time

    from stable_rl.cli import sweep

    first_wave = min(parallel or 8, 2 * per_gpu)
    barrier = threading.Barrier(first_wave, timeout=10)
    running: dict[str, str] = {}
    entered, busiest = [], []
    lock = threading.Lock()

    def fake_run(command, env, preexec_fn=None):  # stands in for the stable-rl fit subprocess
        name = next(a for a in command if a.startswith("--trainer.logger.init_args.name="))
        with lock:
            running[name] = env["CUDA_VISIBLE_DEVICES"]
            entered.append(env["CUDA_VISIBLE_DEVICES"])
            busiest.append(max(list(running.values()).count(d) for d in ("5", "7")))
            in_first_wave = len(entered) <= first_wave
        if in_first_wave:
            barrier.wait()
        time.sleep(0.05 if name.endswith("s0") else 0.2)
        with lock:
            del running[name]
        return SimpleNamespace(returncode=0)

    monkeypatch.setattr(sweep.subprocess, "run", fake_run)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")
    runs = plan(["recipes/minirl.yaml"], list(range(8)), "out", [])
    assert sweep.execute(runs, parallel=parallel, gpus=2, per_gpu=per_gpu) == [0] * 8
    wave = entered[:first_wave]
    assert sorted(wave) == sorted(["5", "7"] * (first_wave // 2))  # spread evenly over both GPUs
    assert len(entered) == 8 and max(busiest) <= per_gpu


def test_parallel_runs_on_cpu_get_disjoint_cores(monkeypatch):
    """No GPU, four cores, two runs at a time: each run is pinned to its own two cores, torch and vLLM
    threads included, and no two running runs share a core."""
    import threading
    import time

    from stable_rl.cli import sweep

    running: dict[str, set[int]] = {}
    shared, pinned = [], []
    lock = threading.Lock()

    def fake_run(command, env, preexec_fn=None):
        name = next(a for a in command if a.startswith("--trainer.logger.init_args.name="))
        cores = {int(c) for c in env["VLLM_CPU_OMP_THREADS_BIND"].split(",")}
        with lock:
            shared.append(any(cores & other for other in running.values()))
            running[name] = cores
            pinned.append((env["OMP_NUM_THREADS"], preexec_fn is not None))
        time.sleep(0.05)
        with lock:
            del running[name]
        return SimpleNamespace(returncode=0)

    monkeypatch.setattr(sweep.subprocess, "run", fake_run)
    monkeypatch.setattr(sweep.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    runs = plan(["recipes/minirl.yaml"], list(range(4)), "out", [])
    assert sweep.execute(runs, parallel=2, gpus=0) == [0] * 4
    assert shared == [False] * 4 and pinned == [("2", True)] * 4
    assert [s.cpus for s in sweep.cpu_slots(2)] == [(0, 1), (2, 3)]


def test_without_gpus_and_parallel_the_runs_go_one_at_a_time(monkeypatch):
    """No GPU and no ``--parallel``: one run at a time, none pinned (the CPU default; on GPUs the default is
    every slot at once)."""
    import threading
    import time

    from stable_rl.cli import sweep

    running, most, pinned = [0], [0], []
    lock = threading.Lock()

    def fake_run(command, env, preexec_fn=None):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            pinned.append(preexec_fn is not None)
        time.sleep(0.02)
        with lock:
            running[0] -= 1
        return SimpleNamespace(returncode=0)

    monkeypatch.setattr(sweep.subprocess, "run", fake_run)
    runs = plan(["recipes/minirl.yaml"], list(range(3)), "out", [])
    assert sweep.execute(runs, gpus=0) == [0] * 3
    assert most == [1] and pinned == [False] * 3
