"""Training runs that take turns on one GPU, each in its own process, without restarting: a child reports its
step records in blocks on a pipe and, after each block, waits (its GPU cache emptied) for the parent's word
to go on. So the runs of two frameworks, each holding its model and its sleeping vLLM engine, can be timed
in interleaved rounds at the cost of one start each."""

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

GO, STOP = "go", "stop"
LOG_TAIL = 40  # lines of a failed child's output quoted in the error


class Pacer:
    """The child's side. ``record`` each step as it ends: after the first ``warmup`` steps, and then after
    every ``block`` steps, the records and the latest ``info`` go to the parent (one JSON line on the file
    descriptor ``report_fd``), and the child waits for a line on stdin: ``go`` to go on, anything else (or
    the end of stdin) to end the process at once. A step's ``seconds`` leave out the waiting before it."""

    def __init__(self, report_fd: int, warmup: int, block: int) -> None:
        os.set_inheritable(report_fd, False)  # a process this one starts must not keep the parent waiting
        self.report = os.fdopen(report_fd, "w")
        self.size, self.block = warmup, block
        self.records: list[dict] = []
        self.waited = 0.0

    def record(self, step: dict, info: dict) -> None:
        if step["seconds"] is not None:
            step["seconds"] -= self.waited
        self.waited = 0.0
        self.records.append(step)
        if len(self.records) == self.size:
            self.report.write(json.dumps({"info": info, "steps": self.records}) + "\n")
            self.report.flush()
            self.records, self.size = [], self.block
            self.wait()

    def wait(self) -> None:
        start = time.perf_counter()
        torch = sys.modules.get("torch")  # a run on a GPU has imported it
        if torch is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()  # the other run's turn: it gets the memory this one cached
        if sys.stdin.readline().strip() != GO:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)  # no teardown: the parent has what it needs
        self.waited = time.perf_counter() - start


class PacedChild:
    """The parent's side of one child: ``command`` started with ``--report-fd FD`` appended, its output into
    ``log``; ``block`` reads its next report, ``go`` lets it run its next block and reads that."""

    def __init__(self, command: list[str], log: Path) -> None:
        read, write = os.pipe()
        self.log = log
        with log.open("w") as out:
            self.process = subprocess.Popen(
                [*command, "--report-fd", str(write)],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
                pass_fds=(write,),
                text=True,
                start_new_session=True,  # its own process group: ``stop`` ends what it started, too
            )
        os.close(write)
        self.reports = os.fdopen(read)

    def block(self) -> dict:
        """The next report: {"info": ..., "steps": [record, ...]}."""
        while not select.select([self.reports], [], [], 1.0)[0]:
            if self.process.poll() is not None:  # ended (a process it started may hold the pipe open)
                self._failed()
        line = self.reports.readline()
        if not line:
            self._failed()
        return json.loads(line)

    def _failed(self) -> None:
        code = self.process.wait()
        tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-LOG_TAIL:])
        raise RuntimeError(f"the child ended (exit code {code}) without its report; the end of {self.log}:\n{tail}")

    def go(self) -> dict:
        self._say(GO)
        return self.block()

    def stop(self) -> None:
        """End the child (at once if it is waiting), wait for it, then end the processes it started and left
        (a child that ends at once leaves, e.g., its verifier's process pool)."""
        with contextlib.suppress(BrokenPipeError):  # it may have ended already
            self._say(STOP)
        with contextlib.suppress(BrokenPipeError):
            self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        with contextlib.suppress(ProcessLookupError):  # none left
            os.killpg(self.process.pid, signal.SIGKILL)
        self.reports.close()

    def _say(self, word: str) -> None:
        self.process.stdin.write(word + "\n")
        self.process.stdin.flush()
