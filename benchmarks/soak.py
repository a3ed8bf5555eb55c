"""Soak: the quickstart on CPU with vLLM for a fixed wall time, sampling the process's resident
memory and open file descriptors after every step. Prints a table (every few minutes) and the
slope of each over the second half of the run (the first half includes warm-up growth), and plots
both (PNG). A leak (an engine or a verifier pool per weight sync) shows as a steady slope.

    python -m benchmarks.soak [--minutes 60] [--out benchmarks/soak.png] [-- extra stable-rl fit args]

(``nox -s soak``; not part of the test suite.)
"""

import argparse
import os
import sys
import time

import lightning as L

from benchmarks._fit import fit_with, split_extra
from stable_rl.analysis.figures import save_figure


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def children() -> int:
    """Live child processes (verifier workers, forkserver)."""
    return sum(1 for pid in os.listdir("/proc") if pid.isdigit() and _parent(pid) == os.getpid())


def _parent(pid: str) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return -1


class Resources(L.Callback):
    """(minutes, step, RSS MiB, open fds, child processes) after every training step."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.samples: list[tuple[float, int, float, int, int]] = []

    def on_train_batch_end(self, trainer, *args) -> None:
        minutes = (time.monotonic() - self.start) / 60
        self.samples.append((minutes, trainer.global_step, rss_mib(), open_fds(), children()))


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x."""
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    return sum((x - mx) * (y - my) for x, y in points) / max(sum((x - mx) ** 2 for x, _ in points), 1e-12)


def main() -> None:
    own, extra = split_extra(sys.argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--out", default="benchmarks/soak.png")
    args = parser.parse_args(own)

    hours, minutes = divmod(int(args.minutes), 60)
    probe = Resources()
    fit_with(
        probe,
        [
            "--config=recipes/minirl.yaml",
            "--config=recipes/quickstart.yaml",
            "--trainer.max_steps=-1",
            "--trainer.max_epochs=-1",
            f"--trainer.max_time=00:{hours:02d}:{minutes:02d}:00",
            "--trainer.enable_progress_bar=false",
            "--trainer.logger.init_args.save_dir=runs/soak",
            *extra,
        ],
    )

    samples = probe.samples
    print("\n| minutes | step | RSS MiB | open fds | child processes |\n|---|---|---|---|---|")
    every = max(1, len(samples) // 12)
    for t, step, rss, fds, kids in samples[::every] + samples[-1:]:
        print(f"| {t:.1f} | {step} | {rss:.0f} | {fds} | {kids} |")
    half = samples[len(samples) // 2 :]
    rss_slope = slope([(t, rss) for t, _, rss, _, _ in half]) * 60
    fd_slope = slope([(t, fds) for t, _, _, fds, _ in half]) * 60
    print(
        f"\nsecond half ({len(half)} steps, {half[0][0]:.1f}-{half[-1][0]:.1f} min): RSS slope {rss_slope:+.1f} MiB/h, "
        f"open-fd slope {fd_slope:+.2f} /h; weight syncs: {samples[-1][1]}"
    )

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.4))
    left.plot([s[0] for s in samples], [s[2] for s in samples])
    left.set(title="resident memory (MiB)", xlabel="minutes")
    right.plot([s[0] for s in samples], [s[3] for s in samples], label="open fds")
    right.plot([s[0] for s in samples], [s[4] for s in samples], label="child processes")
    right.set(title="file descriptors, processes", xlabel="minutes")
    right.legend()
    for ax in (left, right):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, args.out)
    print(f"plot: {args.out}")


if __name__ == "__main__":
    main()
