"""MathVerifier: binary reward R(x, y) in {0, 1} from math-verify, in a forkserver process pool.

math-verify (sympy) can hang on hostile answers such as ``\\boxed{10^{10^{10}}}``. Each item therefore
runs under a SIGALRM timer inside a worker process (signals work only in a process's main thread, so
never in threads of the parent, which runs vLLM and torch). Workers report every item's start and
result through a pipe; if the pipe stays silent for a second longer than the timeout (a worker stuck in
C code, or killed), the pool is killed and replaced: the items in flight get 0, the others are retried.
Workers fork from a forkserver that has imported the main module and this one once (a clean,
single-threaded process), so a new pool starts in milliseconds and shares those pages.

Nothing outlives the run: each worker exits as soon as the run's process is gone, however it died (SIGKILL
included), and the forkserver exits when its last client has. SIGTERM and SIGINT sent to the run's whole process
group (``timeout``, a scheduler's end of job, Ctrl-C) do not reach them: the graceful stop that follows a SIGTERM
still scores its last rollout. A worker that dies anyway (the out-of-memory killer) breaks its pool: the verifier
warns and scores on a new one.
"""

import logging
import math
import multiprocessing as mp
import os
import re
import signal
import threading
import time
import unicodedata
import warnings
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from types import TracebackType
from typing import Self

import torch
from math_verify import LatexExtractionConfig, parse, verify

from stable_rl import StableRLWarning
from stable_rl.compat.process_pool import kill_workers, start_forkserver, worker_processes

_GRACE_S = 1.0  # slack on top of the per-item timeout before a silent pool counts as hung
_CHECK_S = 0.1  # how often a call waiting for results looks for a dead worker
_CHUNKS_PER_WORKER = 4  # a few chunks per worker balance the load at a few futures per call
_LATEX = [LatexExtractionConfig()]
_BRACE = re.compile(r"[{}]")
_FULL_WIDTH = {code: code - 0xFEE0 for code in range(0xFF01, 0xFF5F)} | {0x3000: 0x20}  # ４ -> 4, － -> -

_outbox: Connection  # set in each worker by _init_worker


class _ItemTimeout(BaseException):
    """Raised by SIGALRM; a BaseException so that math-verify's ``except Exception`` can't swallow it."""


def _raise_timeout(signum: int, frame: object) -> None:
    raise _ItemTimeout


def _exit_with_run(run: BaseProcess) -> None:
    run.join()  # waits on a pipe that the run's process alone holds open: returns once it is gone
    os._exit(1)


def _init_worker(outbox: Connection) -> None:
    global _outbox
    _outbox = outbox
    signal.signal(signal.SIGALRM, _raise_timeout)
    for signum in (signal.SIGTERM, signal.SIGINT):  # sent to the run's process group; the run alone handles them
        signal.signal(signum, signal.SIG_IGN)
    run = mp.parent_process()  # the process that made the pool (the forkserver forked this one)
    if run is not None:
        threading.Thread(target=_exit_with_run, args=(run,), name="exit-with-run", daemon=True).start()
    warnings.simplefilter("ignore")  # the parent's -W flags reach the workers; -W error would turn rewards to 0
    # math-verify warns that its own timeouts are off (ours replace them) and logs whole answers.
    logging.getLogger("math_verify").setLevel(logging.ERROR)


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` of ``text`` (nested braces matched); None if absent or unclosed."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    begin = start + len("\\boxed{")
    depth = 1
    for brace in _BRACE.finditer(text, begin):
        depth += 1 if brace.group() == "{" else -1
        if depth == 0:
            return text[begin : brace.start()]
    return None


def plain_characters(text: str) -> str:
    """``text`` with look-alike characters read as the plain ones that math-verify parses: full-width forms as
    ASCII, every decimal digit (Arabic-Indic, Devanagari, ...) as its ASCII digit, and format characters (zero-width
    spaces, direction marks) removed. Superscripts and other compatibility forms stay (NFKC would read ``10²`` as 102)."""
    if text.isascii():
        return text
    return "".join(
        str(unicodedata.decimal(c)) if c.isdecimal() else "" if unicodedata.category(c) == "Cf" else c
        for c in text.translate(_FULL_WIDTH)
    )


def _parse_boxed(content: str) -> list:
    return parse(f"\\boxed{{{content}}}", extraction_config=_LATEX, parsing_timeout=None)


def is_correct(response: str, answer: str, require_boxed: bool = True) -> bool:
    """Whether math-verify finds the response's final answer equal to the gold ``answer``.

    The gold answer is read as the content of a ``\\boxed{}``, so "0.5" and "\\frac{1}{2}" both parse. Both are read
    with ``plain_characters``. Unbounded in time: run it under a timer, as the workers do.
    """
    response, answer = plain_characters(response), plain_characters(answer)
    if require_boxed:
        content = last_boxed(response)
        if content is None:
            return False
        prediction = _parse_boxed(content)
    else:
        prediction = parse(response, parsing_timeout=None)
    return verify(_parse_boxed(answer), prediction, timeout_seconds=None)


def _score(response: str, answer: str, timeout: float, require_boxed: bool) -> tuple[float, bool]:
    """(reward, whether the item ran out of time)."""
    try:
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            return float(is_correct(response, answer, require_boxed)), False
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _ItemTimeout:  # the one-shot timer may fire inside `finally`: caught here too
        return 0.0, True
    except Exception:
        return 0.0, False


def _score_chunk(
    indices: list[int], responses: list[str], answers: list[str], timeout: float, require_boxed: bool
) -> None:
    """Worker task: send ``(i, None)`` when item i starts and ``(i, (reward, timed_out))`` when it ends.

    Messages are a few bytes, so each send is one atomic pipe write and workers need no lock.
    """
    for i, response, answer in zip(indices, responses, answers, strict=True):
        _outbox.send((i, None))
        _outbox.send((i, _score(response, answer, timeout, require_boxed)))


class MathVerifier:
    """Binary reward R(x, y) in {0, 1} from math-verify, run in a process pool with a timeout.

    Args:
        num_workers: worker processes, forked from a forkserver on the first call.
        timeout: seconds per item; an item that takes longer gets reward 0.
        require_boxed: score only the last ``\\boxed{}`` of a response (0 without one); if False, use
            math-verify's default extraction of the last answer.

    Called, it gives the rewards; ``score`` also says which items ran out of time. Use as a context manager or
    call ``close()``; a closed verifier starts a new pool when called.
    """

    def __init__(self, num_workers: int = 2, timeout: float = 5.0, require_boxed: bool = True) -> None:
        if num_workers < 1 or timeout <= 0:
            raise ValueError(f"need num_workers >= 1 and timeout > 0, got {num_workers} and {timeout}")
        self.num_workers = num_workers
        self.timeout = timeout
        self.require_boxed = require_boxed
        self._pool: ProcessPoolExecutor | None = None
        self._pipe: tuple[Connection, Connection] | None = None  # (parent's inbox, workers' outbox)
        self._scored = False  # whether the pool has scored an item: one that died before is not retried
        self._workers: dict[int | None, BaseProcess] = {}  # the pool's workers so far, by pid, to name a death

    def __call__(self, responses: Sequence[str], answers: Sequence[str]) -> torch.Tensor:
        """Rewards ``[n]`` (float32, 0.0 or 1.0) of ``responses`` against the gold ``answers``."""
        return self.score(responses, answers)[0]

    def score(self, responses: Sequence[str], answers: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Rewards ``[n]`` (float32, 0.0 or 1.0) and which items ran out of time ``[n]`` (bool, reward 0)."""
        if len(responses) != len(answers):
            raise ValueError(f"got {len(responses)} responses but {len(answers)} answers")
        results = [(0.0, True)] * len(responses)  # an item left in a hung pool keeps (0, timed out)
        todo = list(range(len(responses)))
        while todo:
            left = self._run(todo, responses, answers, results)
            if len(left) == len(todo) and not self._scored:  # a new pool died before it scored anything
                raise RuntimeError(f"math-verify workers died before scoring any of {len(todo)} items: see the warning")
            todo = left
        rewards, timed_out = zip(*results, strict=True) if results else ((), ())
        return torch.tensor(rewards, dtype=torch.float32), torch.tensor(timed_out, dtype=torch.bool)

    def _run(
        self, todo: list[int], responses: Sequence[str], answers: Sequence[str], results: list[tuple[float, bool]]
    ) -> list[int]:
        """Score ``todo`` into ``results`` in one pool; if it hangs or a worker dies, replace it and return the items
        to retry (those in flight in it keep reward 0: they may be what hung or killed it)."""
        pool, inbox = self._start()
        size = math.ceil(len(todo) / (self.num_workers * _CHUNKS_PER_WORKER))
        futures = []
        try:
            for k in range(0, len(todo), size):
                chunk = todo[k : k + size]
                responses_chunk, answers_chunk = [responses[i] for i in chunk], [answers[i] for i in chunk]
                futures.append(
                    pool.submit(_score_chunk, chunk, responses_chunk, answers_chunk, self.timeout, self.require_boxed)
                )
        except BrokenProcessPool:  # a worker died since the last call
            self._replace_dead_pool(len(todo))
            return todo
        self._workers.update((process.pid, process) for process in worker_processes(pool))
        left, running = set(todo), set[int]()
        heard = time.monotonic()
        while left:
            if inbox.poll(_CHECK_S):
                i, result = inbox.recv()
                heard, self._scored = time.monotonic(), True
                if result is None:
                    running.add(i)
                else:
                    results[i] = result
                    running.discard(i)
                    left.discard(i)
                continue
            died = any(_failed(future) for future in futures)
            if not died and time.monotonic() - heard < self.timeout + _GRACE_S:
                continue
            if died:
                self._replace_dead_pool(len(left))
            else:
                self.close()
                if not running:
                    raise RuntimeError(f"math-verify workers sent nothing for {self.timeout + _GRACE_S:.1f} s")
            return sorted(left - running)  # the items in flight hung or died with their worker and keep reward 0
        return []

    def _replace_dead_pool(self, left: int) -> None:
        assert self._pool is not None
        workers = list(self._workers.values())
        self.close()  # joins the pool's thread first: it reads the exit codes too, and two readers race (one gets 255)
        codes = [process.exitcode for process in workers]
        ended = ", ".join(sorted({_ending(code) for code in codes if code is not None})) or "ended"
        warnings.warn(
            f"a math-verify worker process died ({ended}: killed, e.g. by the out-of-memory killer): the verifier "
            f"starts a new pool of {self.num_workers} workers and scores the {left} items left on it",
            StableRLWarning,
            stacklevel=4,
        )

    def _start(self) -> tuple[ProcessPoolExecutor, Connection]:
        if self._pool is None or self._pipe is None:
            ctx = mp.get_context("forkserver")
            ctx.set_forkserver_preload(["__main__", __name__])
            start_forkserver()
            self._pipe, self._scored = ctx.Pipe(duplex=False), False
            self._pool = ProcessPoolExecutor(
                self.num_workers, mp_context=ctx, initializer=_init_worker, initargs=(self._pipe[1],)
            )
            try:
                self._pool.submit(abs, 0).result()  # wait for a first worker: the forkserver's imports take seconds
            except BaseException:
                self.close()  # so that the next call tries a fresh pool
                raise
        return self._pool, self._pipe[0]

    def close(self) -> None:
        """Kill the workers (they may hang) and release the pool; idempotent."""
        if self._pool is not None:
            kill_workers(self._pool)
            self._pool.shutdown(cancel_futures=True)
            self._pool, self._workers = None, {}
        if self._pipe is not None:
            for end in self._pipe:
                end.close()
            self._pipe = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _failed(future: Future) -> bool:
    return future.done() and not future.cancelled() and future.exception() is not None


def _ending(exit_code: int) -> str:
    return f"signal {signal.Signals(-exit_code).name}" if exit_code < 0 else f"exit code {exit_code}"
