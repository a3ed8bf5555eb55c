"""What the terminal of ``stable-rl fit`` shows: the progress bar (reward, KL, entropy), stable-rl's own
warnings and the summary. Every other line (vLLM's and Lightning's logs, library warnings, C++ messages on
stderr) goes to ``console.log`` in the run's log directory; ``STABLE_RL_VERBOSE=1`` keeps them all on the
terminal. Only the ``stable-rl`` console script does this; ``stable_rl.cli.main`` (tests, notebooks) leaves
the streams alone."""

import logging
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

from stable_rl import StableRLWarning

VERBOSE = "STABLE_RL_VERBOSE"
LOG_DIR = "STABLE_RL_CONSOLE_LOG_DIR"  # rank 0's log directory, inherited by the processes Lightning starts
LIGHTNING_LOGGERS = ("lightning.pytorch", "lightning.fabric")
VLLM_CONFIGURE = "VLLM_CONFIGURE_LOGGING"


class ConsoleLog:
    """Sends file descriptor 2, Python warnings and vLLM's log records to ``path`` between ``start`` and
    ``stop``; warnings of category ``StableRLWarning`` are also printed on the terminal."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self._restore: Callable[[], None] | None = None

    @property
    def active(self) -> bool:
        return self._restore is not None

    def start(self, path: Path, terminal_fd: int = 2) -> None:
        """From now on into ``path``; ``terminal_fd`` reaches the terminal (2, or 1 in a process whose fd 2
        already points at rank 0's log), where ``stop`` puts fd 2 back."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        log = open(path, "a", buffering=1)  # noqa: SIM115 (closed by stop)
        sys.stderr.flush()
        saved_fd = os.dup(terminal_fd)
        os.dup2(log.fileno(), 2)  # C++ and child-process output, Lightning's log handler (made on stderr)
        saved_stderr, sys.stderr = sys.stderr, log_stream(log)  # Python's writes (tqdm bars, ...)

        def show(message, category, filename, lineno, file=None, line=None) -> None:
            log.write(warnings.formatwarning(message, category, filename, lineno, line))
            if issubclass(category, StableRLWarning):
                print(f"warning: {message}", file=sys.stdout)  # while the rich bar runs: printed above it

        saved_showwarning, warnings.showwarning = warnings.showwarning, show
        saved_levels = {name: logging.getLogger(name).level for name in LIGHTNING_LOGGERS}
        for name in LIGHTNING_LOGGERS:  # their records go to the log from now on (their handler is on fd 2)
            logging.getLogger(name).setLevel(logging.INFO)
        # vLLM would print its records to stdout (its own handler): into the log instead, once it is imported
        saved_configure = os.environ.get(VLLM_CONFIGURE)
        os.environ.setdefault(VLLM_CONFIGURE, "0")
        handler = logging.StreamHandler(log)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        vllm = logging.getLogger("vllm")
        saved_handlers, vllm.handlers = vllm.handlers, [handler]  # vLLM's own, if it was imported already
        saved_propagate, vllm.propagate = vllm.propagate, False

        def restore() -> None:
            try:
                sys.stderr.flush()
            finally:  # the terminal comes back whatever the flush raised
                sys.stderr = saved_stderr
                os.dup2(saved_fd, 2)
                os.close(saved_fd)
                warnings.showwarning = saved_showwarning
                vllm.handlers, vllm.propagate = saved_handlers, saved_propagate
                for name, level in saved_levels.items():
                    logging.getLogger(name).setLevel(level)
                if saved_configure is None:
                    os.environ.pop(VLLM_CONFIGURE, None)
                log.close()

        self._restore = restore

    def stop(self) -> None:
        """Back to the terminal (also after an error, so that its traceback is seen)."""
        if self._restore is not None:
            self._restore()
            self._restore = None


def log_target(trainer) -> tuple[Path, int] | None:
    """Where a process of the run logs, and its descriptor of the terminal: rank 0 into ``console.log`` in the
    run's log directory; the processes Lightning starts from it inherit that directory (``console-rank<r>.log``
    beside it: their own logger would number another version) and its fd 2, already the log, so their
    terminal is fd 1; a process started by another launcher (another node) is left on its terminal."""
    rank = trainer.global_rank
    if inherited := os.environ.get(LOG_DIR):
        return Path(inherited) / f"console-rank{rank}.log", 1
    if rank != 0:
        return None
    directory = Path(trainer.log_dir or trainer.default_root_dir)
    os.environ[LOG_DIR] = str(directory)
    return directory / "console.log", 2


def log_stream(file):
    """``file`` as ``sys.stderr``. Lightning's rich progress bar, while it runs, sends whatever is written to
    ``sys.stderr`` to the terminal through a ``rich.file_proxy.FileProxy``, unless ``sys.stderr`` already is
    one: so it is one, writing into the log."""
    try:
        from rich.console import Console
        from rich.file_proxy import FileProxy
    except ImportError:  # no rich: Lightning's progress bar is tqdm's, which leaves sys.stderr alone
        return file

    class RawLog(FileProxy):
        """Writes go into the log as they are (rich's own proxy would render them, markup included)."""

        def write(self, text: str) -> int:
            return file.write(text)

        def flush(self) -> None:
            file.flush()

    return RawLog(Console(file=file), file)


def quiet_lightning_info() -> None:
    """Lightning's start-up lines ("Seed set to 0", "GPU available: ...", its tips) are not printed: they
    come before the run's directory, and so its log, exists."""
    for name in LIGHTNING_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def wanted() -> bool:
    """Whether the terminal is kept short (not with ``STABLE_RL_VERBOSE=1``)."""
    return os.environ.get(VERBOSE, "0") in ("", "0")
