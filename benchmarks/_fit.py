"""What the benchmarks that train share: their own arguments split from ``stable-rl fit``'s (after
``--``), and a fit through the real CLI with a probe callback watching it."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import lightning as L


def split_extra(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the benchmark's arguments, the ``stable-rl fit`` arguments after ``--``)."""
    if "--" not in argv:
        return argv, []
    return argv[: argv.index("--")], argv[argv.index("--") + 1 :]


def fit_with(probe: L.Callback, args: list[str]) -> None:
    """``stable-rl fit`` with ``args``, ``probe`` added to the recipe's callbacks."""
    from stable_rl.cli import main

    fit = main(args, run=False)
    fit.trainer.callbacks.append(probe)
    fit.trainer.fit(fit.model, datamodule=fit.datamodule)
