"""stable-rl: stable reinforcement learning of LLMs with Lightning (arXiv 2512.01374)."""

__version__ = "0.1.0"


class StableRLWarning(UserWarning):
    """A warning for the person watching the run (collapse signs, ...): on the terminal as well as in the run's
    console log (``stable_rl.cli.console_log``)."""
