"""The atlas's tables, remade from the committed logs (experiments/atlas/logs/*/*.tar.xz, each run's metrics.csv and
heldout_outcomes.csv as experiments/atlas/pack_logs.sh packed them).

    python experiments/atlas/analysis.py            # writes experiments/atlas/pilot/dial.md
"""

import csv
import io
import statistics
import tarfile
from pathlib import Path

HERE = Path(__file__).parent
LEVELS = {  # run-name prefix -> (level, setting), PROTOCOL.md Part 1
    "l0_exact": ("L0", "vLLM float32, IEEE kernels (exact control)"),
    "l1_bf16": ("L1", "vLLM bfloat16"),
    "l2_fp8": ("L2", "vLLM FP8 weights"),
    "l3_fp8_kv": ("L3", "FP8 weights + FP8 KV cache"),
    "l4_noise0.1": ("L4", "float32, weight noise 0.1"),
    "l5_noise0.15": ("L5", "float32, weight noise 0.15"),
    "l6_noise0.2": ("L6", "float32, weight noise 0.2"),
    "l7_noise0.3": ("L7", "float32, weight noise 0.3"),
}
READINGS = {  # column -> metric, each the median over a run's training steps (Part 1a)
    "KL k3 per token": "train/kl_k3",
    "per-response gap, median (nats)": "train/health/seq_train_infer_abs_p50",
    "per-response gap, p90 (nats)": "train/health/seq_train_infer_abs_p90",
    "tokens beyond the IS cap": "train/health/train_infer_beyond_cap",
}


def read_runs(archive: Path) -> dict[str, list[dict[str, str]]]:
    """Each run's metrics.csv rows, by run name (the folder above version_0)."""
    runs = {}
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            if member.name.endswith("/metrics.csv"):
                name = Path(member.name).parts[-3]
                runs[name] = list(csv.DictReader(io.TextIOWrapper(tar.extractfile(member), encoding="utf-8")))
    return runs


def step_median(rows: list[dict[str, str]], metric: str) -> float:
    """The median over the run's training steps of ``metric``."""
    return statistics.median(float(row[metric]) for row in rows if row.get(metric))


def first_heldout(rows: list[dict[str, str]]) -> float:
    """The held-out avg@4 before training (step 0): the engine's own samples at the run's level."""
    return next(float(row["val/heldout/avg@4"]) for row in rows if row.get("val/heldout/avg@4"))


def dial_table(runs: dict[str, list[dict[str, str]]]) -> str:
    """Part 1a's dial table: per level, the mean over its runs of each reading's median over steps, the step-0
    held-out avg@4, and whether the level samples below half of L0's (a worse sampler)."""
    by_level = {prefix: [rows for name, rows in runs.items() if name.split("+")[0] == prefix] for prefix in LEVELS}
    heldout = {p: statistics.fmean(first_heldout(rows) for rows in level) for p, level in by_level.items() if level}
    problems = {
        int(float(r["val/heldout/problems"]))
        for level in by_level.values()
        for rows in level
        for r in rows
        if r.get("val/heldout/problems")
    }
    lines = [
        "| level | engine | runs | " + " | ".join(READINGS) + " | held-out avg@4 at step 0 | sampler |",
        "|---|---|---|" + "---|" * len(READINGS) + "---|---|",
    ]
    for prefix, (level, setting) in LEVELS.items():
        rows_of_runs = by_level[prefix]
        if not rows_of_runs:
            continue
        readings = [
            statistics.fmean(step_median(rows, metric) for rows in rows_of_runs) for metric in READINGS.values()
        ]
        worse = "worse: below half of L0's" if heldout[prefix] < heldout["l0_exact"] / 2 else "at least half of L0's"
        cells = [f"{value:.2g}" for value in readings]
        lines.append(
            f"| {level} | {setting} | {len(rows_of_runs)} | "
            + " | ".join(cells)
            + f" | {heldout[prefix]:.3f} | {worse} |"
        )
    steps = {sum(1 for r in rows if r.get("train/kl_k3")) for rows in runs.values()}
    note = (
        f"\nEach reading: the median over a run's {'/'.join(map(str, sorted(steps)))} training steps, averaged over the "
        f"level's runs (seeds 0 and 1, learning rate 1e-4); held-out: {'/'.join(map(str, sorted(problems)))} problems, "
        "4 samples each, before training, mean of the seeds. L0's KL below 0 is float rounding of r - 1 - log r at r = 1.\n"
    )
    return "\n".join(lines) + "\n" + note


def main() -> None:
    runs = read_runs(HERE / "logs" / "pilot" / "dial.tar.xz")
    out = HERE / "pilot" / "dial.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text("# The mismatch dial, measured from runs (PROTOCOL.md Part 1a)\n\n" + dial_table(runs))
    print(out.read_text())


if __name__ == "__main__":
    main()
