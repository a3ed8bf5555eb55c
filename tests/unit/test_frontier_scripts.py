"""The frontier's one-command reports: each script's --report remakes its committed table from its committed
logs alone (the arms, the pairs judged and the rule as the docs cite them), in a copy of the folders it reads."""

import gzip
import lzma
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def report(tmp_path: Path, script: str, args: list[str], *folders: str) -> subprocess.CompletedProcess:
    scripts = [
        p.relative_to(ROOT) for d in ("experiments/frontier", "experiments/long-task") for p in (ROOT / d).glob("*.sh")
    ]
    for path in [*scripts, *(Path(folder) / "logs" for folder in folders)]:
        target = tmp_path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if (ROOT / path).is_dir() else shutil.copy)(ROOT / path, target)
    env = python3_as(tmp_path, f'exec "{sys.executable}" "$@"')  # this interpreter, with the package
    return subprocess.run(["bash", script, *args], cwd=tmp_path, env=env, capture_output=True, text=True)


def python3_as(tmp_path: Path, body: str) -> dict:
    """The environment in which the scripts' ``python3`` is a shell script of ``body`` (``src`` importable)."""
    python = tmp_path / "bin" / "python3"
    python.parent.mkdir()
    python.write_text(f"#!/bin/sh\n{body}\n")
    python.chmod(0o755)
    return os.environ | {"PATH": f"{python.parent}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT / "src")}


def recording_sweep(tmp_path: Path, calls: Path) -> dict:
    """An environment whose sweep prints its commands (``--dry-run``) into ``calls`` and whose report records
    its arguments there, in a checkout with the recipes (the sweep checks that each recipe file exists)."""
    env = python3_as(
        tmp_path,
        f'if [ "$2" = stable_rl.cli.sweep ]; then "{sys.executable}" "$@" --dry-run >> "{calls}"; '
        f'else echo "$@" >> "{calls}"; fi',
    )
    shutil.copytree(ROOT / "recipes", tmp_path / "recipes")
    for folder in ("experiments/frontier", "experiments/long-task"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        for path in (ROOT / folder).glob("*.sh"):
            shutil.copy(path, tmp_path / folder)
    return env | {"SAVE_DIR": str(tmp_path / "runs")}


@pytest.mark.slow  # each report remade from its committed logs: ~3 s, 15 of them
@pytest.mark.parametrize(
    ("script", "args", "folder"),
    [
        ("experiments/frontier/run_onpolicy.sh", ["--report"], "experiments/frontier/onpolicy"),
        ("experiments/frontier/run_n8.sh", ["--report"], "experiments/frontier/n8"),
        ("experiments/frontier/run_offpolicy.sh", ["2", "--report"], "experiments/frontier/n2"),
        ("experiments/frontier/run_offpolicy.sh", ["4", "--report"], "experiments/frontier/n4"),
        ("experiments/frontier/run_offpolicy.sh", ["16", "--report"], "experiments/frontier/n16"),
        ("experiments/frontier/run_fp4.sh", ["--report"], "experiments/frontier/fp4"),
        ("experiments/long-task/run_frontier.sh", ["--report"], "experiments/long-task/frontier"),
        (
            "experiments/long-task/run_frontier.sh",
            ["--report", "experiments/long-task/frontier/preview"],
            "experiments/long-task/frontier/preview",
        ),
        ("experiments/long-task/run_n8.sh", ["--report"], "experiments/long-task/n8"),
    ],
)
def test_a_frontier_report_remakes_its_committed_table(tmp_path, script, args, folder):
    control = ["experiments/frontier/onpolicy"] if folder.endswith("fp4") else []  # the FP4 table's exact arm
    done = report(tmp_path, script, args, folder, *control)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / folder / "frontier.md").read_text() == (ROOT / folder / "frontier.md").read_text()


@pytest.mark.slow
def test_the_across_n_figure_remakes_its_committed_table(tmp_path):
    waves = [f"experiments/frontier/{wave}" for wave in ("onpolicy", "n2", "n4", "n8", "n16")]
    done = report(tmp_path, "experiments/frontier/run_across.sh", [], *waves)
    assert done.returncode == 0, done.stderr
    across = "experiments/frontier/across/across.md"
    assert (tmp_path / across).read_text() == (ROOT / across).read_text()


@pytest.mark.slow
@pytest.mark.parametrize("wave", ["wave1", "wave2", "wave3", "long1", "pace", "long2"])
def test_a_fixed_rate_report_remakes_its_committed_table(tmp_path, wave):
    """run_fixed_lr.sh --report DIR: each wave's committed report.md (the tables experiments/long-task/README.md cites), from its logs."""
    folder = f"experiments/long-task/fixed_lr/{wave}"
    done = report(tmp_path, "experiments/long-task/run_fixed_lr.sh", ["--report", folder], folder)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / folder / "report.md").read_text() == (ROOT / folder / "report.md").read_text()


def test_the_off_policy_script_takes_n_2_4_8_or_16(tmp_path):
    done = report(tmp_path, "experiments/frontier/run_offpolicy.sh", ["3", "--report"], "experiments/frontier/n8")
    assert done.returncode == 2 and "N = 2, 4, 8 or 16 (got '3')" in done.stderr


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_the_off_policy_pairs_name_the_runs_the_sweep_makes(tmp_path, n):
    """run_offpolicy.sh N: every variant of a pair it judges is a run name that stable_rl.cli.sweep gives its
    arms (a misspelt pair would read 'no' in the table, with no run behind it)."""
    calls = tmp_path / "calls"
    env = recording_sweep(tmp_path, calls)  # records the sweep's run names and the report's pairs, runs nothing
    script = "experiments/frontier/run_offpolicy.sh"
    done = subprocess.run(["bash", script, str(n), "0"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = calls.read_text().splitlines()
    names = {
        arg.split("=", 1)[1].removesuffix("-s0") for arg in " ".join(lines).split() if "logger.init_args.name=" in arg
    }
    (report_call,) = [line for line in lines if line.startswith("-m stable_rl.analysis.report")]
    pairs = report_call.split("--pair ", 1)[1].split()
    assert len(names) == (8 if n == 8 else 6) and len(pairs) == (10 if n == 8 else 8)
    assert {v for pair in pairs for v in pair.split(":")} <= names


@pytest.mark.parametrize(
    ("arms", "names"),
    [
        (None, ["frontier+noclip+n8", "frontier+n8", "frontier+r2+n8", "frontier+r3+n8", "frontier+exact+n8"]),
        ("exact r3", ["frontier+exact+n8", "frontier+r3+n8"]),
    ],
)
def test_the_long_n8_script_runs_the_arms_asked_for_and_its_pairs_name_its_runs(tmp_path, arms, names):
    """run_n8.sh SEEDS: every arm (or those ARMS names, in its order) x the seeds, three runs sharing each GPU,
    and every variant of a pair the report judges is a run name the sweep gives one of the five arms."""
    calls = tmp_path / "calls"
    env = recording_sweep(tmp_path, calls) | ({"ARMS": arms} if arms else {})
    done = subprocess.run(
        ["bash", "experiments/long-task/run_n8.sh", "1", "2"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    lines = calls.read_text().splitlines()
    runs = [arg.split("=", 1)[1] for line in lines for arg in line.split() if "logger.init_args.name=" in arg]
    assert runs == [f"{name}-s{seed}" for name in names for seed in (1, 2)]
    assert all(line.count("--config=recipes/long/n8.yaml") == 1 for line in lines[:-1])
    (report_call,) = [line for line in lines if line.startswith("-m stable_rl.analysis.report")]
    pairs = {v for pair in report_call.split("--pair ", 1)[1].split() for v in pair.split(":")}
    assert pairs == {"frontier+noclip+n8", "frontier+n8", "frontier+r2+n8", "frontier+r3+n8", "frontier+exact+n8"}


@pytest.mark.parametrize(
    ("arms", "error"),
    [
        ("clip r4", "ARMS: no arm 'r4' (noclip clip r2 r3 exact)"),
        ("r3 clip r3", "ARMS: 'r3' twice (its runs would share one log)"),
        (" ", "ARMS: no arm named (of noclip clip r2 r3 exact)"),
    ],
)
def test_the_long_n8_script_names_a_wrong_arm_list(tmp_path, arms, error):
    calls = tmp_path / "calls"
    env = recording_sweep(tmp_path, calls) | {"ARMS": arms}
    done = subprocess.run(
        ["bash", "experiments/long-task/run_n8.sh", "0"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 2 and error in done.stderr
    assert not calls.exists()  # nothing ran


def fixed_rate_checkout(tmp_path: Path, calls: Path) -> dict[str, str]:
    """A checkout with run_fixed_lr.sh and the recipes, and an environment whose sweep records its commands in
    ``calls`` (and each run's GPU in ``calls.gpus``) and writes a one-row log, the last argument's value (the
    rate, or FIT_ARGS' last) as the reward."""
    log = "$dir/frontier+fixed_lr-s0/version_0"
    env = python3_as(
        tmp_path,
        f'if [ "$2" = stable_rl.cli.sweep ]; then shift 2; for a; do last=${{a#*=}}; done\n'
        f'"{sys.executable}" -m stable_rl.cli.sweep --dry-run "$@" >> "{calls}"\n'
        f'dir=$(echo "$@" | sed "s/.*--save-dir \\([^ ]*\\).*/\\1/"); mkdir -p "{log}"\n'
        f'echo "${{dir##*/}} ${{CUDA_VISIBLE_DEVICES:-unset}}" >> "{calls}.gpus"\n'
        f'printf "step,train/reward\\n0,%s\\n" "$last" > "{log}/metrics.csv"\n'
        f'printf "from $PWD/example.py\\nat /opt/v/lib/python3.12/site-packages/torch/b.py:3: W\\n'
        f'in /wheels/target/vllm/c.py\\n" > "{log}/console.log"\n'
        f'else exec "{sys.executable}" "$@"; fi',
    )
    shutil.copytree(ROOT / "recipes", tmp_path / "recipes")
    (tmp_path / "experiments" / "long-task").mkdir(parents=True)
    for script in ("run_fixed_lr.sh", "scrub_paths.py"):
        shutil.copy(ROOT / "experiments/long-task" / script, tmp_path / "experiments/long-task")
    return env | {"PYTHONPATH": f"/wheels/target:{env['PYTHONPATH']}"}  # a --target install folder first


def test_the_fixed_rate_script_runs_each_rate_and_reports_their_logs(tmp_path):
    """run_fixed_lr.sh RATE[:OVERLAY]...: one sweep per run, each given its rate (and overlay) and its own folder,
    each run's log copied to logs/lr<RATE>[+<overlay>]/ and the report made from the copies (the sweep records
    its commands and writes a one-row log, its rate as the reward, instead of training)."""
    calls = tmp_path / "calls"
    env = fixed_rate_checkout(tmp_path, calls)
    specs = ["1e-6", "3e-6", "3e-6:recipes/long/exact.yaml"]
    done = subprocess.run(
        ["bash", "experiments/long-task/run_fixed_lr.sh", *specs], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    commands = {c.split("save_dir=")[1].split()[0]: c for c in calls.read_text().splitlines()}
    stack = "--config=recipes/long/frontier.yaml --config=recipes/long/fixed_lr.yaml"
    expected = {
        "lr1e-6": (stack, "1e-6"),
        "lr3e-6": (stack, "3e-6"),
        "lr3e-6+exact": (f"{stack} --config=recipes/long/exact.yaml --seed", "3e-6"),
    }
    assert sorted(commands) == [f"runs/long_fixed_lr/{name}" for name in sorted(expected)]
    logs = tmp_path / "experiments/long-task/fixed_lr/logs"
    report_md = (tmp_path / "experiments/long-task/fixed_lr/report.md").read_text()
    for name, (configs, rate) in expected.items():
        command = commands[f"runs/long_fixed_lr/{name}"]
        assert configs in command and command.endswith(f"--model.init_args.optimizer.init_args.lr={rate}")
        rows = lzma.decompress((logs / name / "version_0" / "metrics.csv.xz").read_bytes()).decode().splitlines()
        assert rows[1] == f"0,{rate}"  # the run's log: its rate, as the fake wrote it
        assert f"| train/reward | {name}/version_0 | {float(rate):.4g} | 0 |" in report_md
    assert "exact" not in commands["runs/long_fixed_lr/lr3e-6"]


@pytest.mark.parametrize(
    ("visible", "smi", "expected"),
    [
        ("5,7", "", ["5", "7", "5"]),  # the GPUs CUDA_VISIBLE_DEVICES names
        (None, "0\n1\n", ["0", "1", "0"]),  # unset: every GPU of the machine
        (None, "", ["unset"] * 3),  # no GPU: none named
        ("", "0\n1\n", ["unset"] * 3),  # set empty: no GPU, whatever the machine has
        (" 3, 4", "", ["3", "4", "3"]),  # spaces dropped
    ],
)
def test_the_fixed_rate_script_deals_its_runs_to_the_visible_gpus(tmp_path, visible, smi, expected):
    """Each rate is a sweep of one run, which its sweep alone would put on the first GPU: the script gives the
    runs the visible GPUs in turn (``nvidia-smi`` here a script printing the machine's GPU indices)."""
    calls = tmp_path / "calls"
    env = fixed_rate_checkout(tmp_path, calls)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    smi_script = tmp_path / "bin" / "nvidia-smi"
    smi_script.write_text(f"#!/bin/sh\nprintf '{smi}'\n")
    smi_script.chmod(0o755)
    specs = ["1e-6", "2e-6", "2e-6:recipes/long/exact.yaml"]
    done = subprocess.run(
        ["bash", "experiments/long-task/run_fixed_lr.sh", *specs], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    gpus = dict(line.split() for line in Path(f"{calls}.gpus").read_text().splitlines())
    assert gpus == dict(zip(["lr1e-6", "lr2e-6", "lr2e-6+exact"], expected, strict=True))


def test_the_fixed_rate_script_writes_a_wave_to_its_own_folder_and_passes_fit_args_to_every_run(tmp_path):
    """OUT_DIR: a wave on its own cold start keeps its logs and report apart (experiments/long-task/fixed_lr/wave1, ...);
    SEED seeds every run; FIT_ARGS reach every run after its rate; each run's console comes along without the
    machine's paths; ``--report DIR`` remakes that folder's report from its logs alone."""
    calls = tmp_path / "calls"
    env = fixed_rate_checkout(tmp_path, calls) | {
        "OUT_DIR": "experiments/long-task/fixed_lr/wave9",
        "SEED": "3",
        "FIT_ARGS": "--trainer.max_time=00:00:12:00 --trainer.val_check_interval=0.25",
    }
    run = ["bash", "experiments/long-task/run_fixed_lr.sh", "2e-6", "2e-6:recipes/long/exact.yaml"]
    done = subprocess.run(run, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    for command in calls.read_text().splitlines():
        assert command.endswith("lr=2e-6 --trainer.max_time=00:00:12:00 --trainer.val_check_interval=0.25")
        assert "--seed_everything=3 " in command and "-s3 " in command
    wave = tmp_path / "experiments/long-task/fixed_lr/wave9"
    assert sorted(p.name for p in (wave / "logs").iterdir()) == ["lr2e-6", "lr2e-6+exact"]
    console = gzip.decompress((wave / "logs" / "lr2e-6" / "version_0" / "console.txt.gz").read_bytes()).decode()
    # the run's console, without the machine's paths
    assert console == "from example.py\nat <site-packages>/torch/b.py:3: W\nin <site-packages>/vllm/c.py\n"
    assert not (tmp_path / "experiments/long-task/fixed_lr/logs").exists()
    report = wave / "report.md"
    first = report.read_text()
    assert "| train/reward | lr2e-6+exact/version_0 | 0.25 | 0 |" in first  # FIT_ARGS' last value, as logged
    report.unlink()
    again = ["bash", "experiments/long-task/run_fixed_lr.sh", "--report", "experiments/long-task/fixed_lr/wave9"]
    remade = subprocess.run(again, cwd=tmp_path, env=env | {"OUT_DIR": ""}, capture_output=True, text=True)
    assert remade.returncode == 0, remade.stderr
    assert report.read_text() == first and calls.read_text().count("\n") == 2  # no run started again


def test_the_fixed_rate_script_fails_after_reporting_where_a_run_failed(tmp_path):
    """One run fails (the sweep exits 1 after logging): the others' logs are still copied and reported, and the
    script exits non-zero naming it (a bare ``wait`` returns 0 whatever its jobs did). A run started again
    replaces its earlier log (the fake logs to version_<n> as CSVLogger does; version_0 is the one copied). A run
    that dies before logging (9e-6) is not reported from the copy an earlier wave left under its name."""
    env = python3_as(
        tmp_path,
        'if [ "$2" = stable_rl.cli.sweep ]; then for a; do last=${a#*=}; done\n'
        '[ "$last" = 9e-6 ] && exit 1\n'
        'dir=$(echo "$@" | sed "s/.*--save-dir \\([^ ]*\\).*/\\1/")/frontier+fixed_lr-s0\n'
        'n=$(ls "$dir" 2>/dev/null | wc -l); mkdir -p "$dir/version_$n"\n'
        'printf "step,train/reward\\n0,%s\\n" "$last" > "$dir/version_$n/metrics.csv"\n'
        '[ "$last" != 4e-6 ]; exit\n'
        f'else exec "{sys.executable}" "$@"; fi',
    )
    shutil.copytree(ROOT / "recipes", tmp_path / "recipes")
    (tmp_path / "experiments" / "long-task").mkdir(parents=True)
    shutil.copy(ROOT / "experiments/long-task/run_fixed_lr.sh", tmp_path / "experiments/long-task")
    stale = tmp_path / "runs/long_fixed_lr/lr1e-6/frontier+fixed_lr-s0/version_0"
    stale.mkdir(parents=True)
    (stale / "metrics.csv").write_text("step,train/reward\n0,0.5\n")  # an earlier attempt's
    earlier = tmp_path / "experiments/long-task/fixed_lr/logs" / "lr9e-6" / "version_0"  # an earlier wave's copy
    earlier.mkdir(parents=True)
    (earlier / "metrics.csv").write_text("step,train/reward\n0,0.75\n")
    done = subprocess.run(
        ["bash", "experiments/long-task/run_fixed_lr.sh", "1e-6 4e-6", "9e-6"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0 and "failed runs: lr4e-6 lr9e-6" in done.stderr, done.stderr
    assert not earlier.exists() and "lr9e-6" not in (tmp_path / "experiments/long-task/fixed_lr/report.md").read_text()
    report_md = (tmp_path / "experiments/long-task/fixed_lr/report.md").read_text()
    for name, rate in (("lr1e-6", "1e-06"), ("lr4e-6", "4e-06")):
        assert f"| train/reward | {name}/version_0 | {rate} | 0 |" in report_md


def scrubbed(text: str, cwd: Path, pythonpath: str, home: str = "/home/u") -> str:
    """experiments/long-task/scrub_paths.py run on ``text`` in ``cwd`` (bytes in and out, as from a console log)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "experiments/long-task/scrub_paths.py")],
        input=text.encode("utf-8", "surrogateescape"),
        cwd=cwd,
        env=os.environ | {"PYTHONPATH": pythonpath, "HOME": home, "PYTHONIOENCODING": "utf-8"},
        capture_output=True,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.decode("utf-8", "surrogateescape")


def test_scrub_paths_drops_the_working_directory_the_pythonpath_folders_and_site_packages(tmp_path):
    """scrub_paths.py: any .../site-packages/ becomes <site-packages>/, an interpreter's path its name, an
    absolute PYTHONPATH entry outside the working directory <site-packages>, the working directory's prefix
    goes (paths become relative, the directory alone .), the home folder ~; the rest is kept as it is."""
    log = (
        f"rootdir: {tmp_path}\n"
        f"File {tmp_path}/src/stable_rl/rl/health.py:3: W\n"
        "cache /home/u/.cache/vllm\n"
        "args=['/opt/v/bin/python3', 'a.py']\n"
        "/tmp/target/vllm/b.py:9: UserWarning: x\n"
        "at /opt/v/lib/python3.12/site-packages/torch/c.py:1\n"
        "step 3: reward 0.25 /tmp/targetx/d.py\n"
    )
    assert scrubbed(log, tmp_path, f"/tmp/target/:{tmp_path}/src") == (
        "rootdir: .\n"
        "File src/stable_rl/rl/health.py:3: W\n"
        "cache ~/.cache/vllm\n"
        "args=['python3', 'a.py']\n"
        "<site-packages>/vllm/b.py:9: UserWarning: x\n"
        "at <site-packages>/torch/c.py:1\n"
        "step 3: reward 0.25 /tmp/targetx/d.py\n"  # another folder whose name only begins like the entry
    )


def test_scrub_paths_leaves_text_that_only_looks_like_a_path(tmp_path):
    """A progress bar's rate before a path, a folder beside or around the working directory, slashes in
    prose, a relative PYTHONPATH entry: only whole paths from their first slash are replaced; at the root
    (cwd /, HOME /, an entry /) nothing is taken for a machine path but site-packages."""
    work = tmp_path / "main"
    work.mkdir()
    log = (
        "12.5it/s]/opt/v/lib/python3.12/site-packages/x.py:2: W\n"
        f"{work}-old/x {work}.bak /mnt{work}/y {work}2/lib\n"
        "loss 1/2, lib/python3 and/or https://example.org/a /home/u/bin/python_tools/a.py\n"
        "a stray byte \udce2 of a cut character\n"
    )
    assert scrubbed(log, work, "src:/") == (
        "12.5it/s]<site-packages>/x.py:2: W\n"
        f"{work}-old/x {work}.bak /mnt{work}/y {work}2/lib\n"
        "loss 1/2, lib/python3 and/or https://example.org/a ~/bin/python_tools/a.py\n"
        "a stray byte \udce2 of a cut character\n"
    )
    assert scrubbed("/tmp/t/a /usr/b 1/2\n", Path("/"), "/tmp/t", home="/") == "<site-packages>/a /usr/b 1/2\n"


def test_scrub_paths_takes_every_form_of_a_package_folder_and_the_working_directory(tmp_path):
    """dist-packages as site-packages, a package folder named alone, paths after a comma or a quote, the
    working directory written with a trailing slash or ending a sentence."""
    log = (
        "/usr/local/lib/python3.12/dist-packages/torch/a.py:1: W\n"
        "torch in /opt/v/lib/python3.12/site-packages (2.11)\n"
        f"--paths={tmp_path}/src,/opt/v/lib/python3.12/site-packages/x args=['/opt/v/bin/python3.12', 'a']\n"
        f"rootdir: {tmp_path}/ and {tmp_path}.\n"
    )
    assert scrubbed(log, tmp_path, "") == (
        "<site-packages>/torch/a.py:1: W\n"
        "torch in <site-packages> (2.11)\n"
        "--paths=src,<site-packages>/x args=['python3.12', 'a']\n"
        "rootdir: ./ and ..\n"
    )
