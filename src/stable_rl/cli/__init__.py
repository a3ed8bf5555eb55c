"""The command line: ``stable-rl`` (LightningCLI over the policy and data modules, ``app``), its help
(``help``), the checks of a config before it is parsed (``config_syntax``, ``renamed_settings``) and before
it is built (``components``), of a resume (``resume``), the run folder held by one run (``run_lock``) and its log
kept across resumes (``run_log``), the console script's terminal (``console_log``) and ``stable-rl-sweep``
(``sweep``)."""

from stable_rl.cli.app import StableRLCLI, console, main

__all__ = ["StableRLCLI", "console", "main"]
