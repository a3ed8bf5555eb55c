"""TrainingReport's figure: one panel per curve, the KL with and without routing replay together."""

import pytest

from stable_rl.callbacks import TrainingReport
from stable_rl.callbacks.training_report import row_sizes, run_title, smoothed


def test_kl_without_replay_shares_the_kl_panel(tmp_path):
    curves = {
        "train/kl_k3": [(1, 2e-5), (2, 3e-5)],
        "train/kl_k3_no_replay": [(1, 4e-5), (2, 9e-5)],
        "train/reward": [(1, 0.5), (2, 0.6)],
    }
    panels = TrainingReport.plot(curves, tmp_path / "report.png")
    assert panels == {"train/kl_k3": ["train/kl_k3", "train/kl_k3_no_replay"], "train/reward": ["train/reward"]}
    assert (tmp_path / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_kl_without_replay_alone_keeps_its_own_panel(tmp_path):
    panels = TrainingReport.plot({"train/kl_k3_no_replay": [(1, 4e-5)]}, tmp_path / "report.png")
    assert panels == {"train/kl_k3_no_replay": ["train/kl_k3_no_replay"]}


def test_a_kl_within_float_rounding_gets_no_panel_and_a_note_instead(tmp_path):
    """The quickstart's float32 engine equals the policy: its KL (1e-6) and KL k3 (1e-9) are float noise, below
    1e-5 at every step; a KL that once reaches 1e-5 is a curve. KL k3 without replay keeps its panel when the KL
    k3 it would share one with is noise."""
    curves = {
        "train/kl": [(1, 2e-6), (2, -9.9e-6)],
        "train/kl_k3": [(1, 3e-9), (2, 1e-9)],
        "train/kl_k3_no_replay": [(1, 1e-5), (2, 2e-6)],
        "train/entropy": [(1, 0.3), (2, 0.2)],
    }
    panels = TrainingReport.plot(curves, tmp_path / "report.png", title="quickstart/version_0: MiniRL")
    assert panels == {"train/entropy": ["train/entropy"], "train/kl_k3_no_replay": ["train/kl_k3_no_replay"]}


@pytest.mark.parametrize(("count", "rows"), [(1, [1]), (3, [3]), (4, [2, 2]), (5, [3, 2]), (7, [3, 2, 2])])
def test_panels_fill_rows_of_at_most_three_with_no_empty_slot(count, rows, tmp_path):
    assert row_sizes(count) == rows
    curves = {f"val/set{i}/avg@4": [(0, 0.1 * i), (50, 0.2)] for i in range(count)}
    assert len(TrainingReport.plot(curves, tmp_path / "report.png")) == count


def test_the_smoothed_curve_is_the_centred_mean_that_narrows_at_the_ends():
    assert smoothed((1, 2, 6, 1)) == [1, 3, 3, 1]  # window 3 inside (len // 40 = 0 -> half-width 1)
    values = tuple(float(i % 2) for i in range(80))  # half-width 2: window 5
    assert smoothed(values)[:4] == [0.0, 1 / 3, 0.4, 0.6] and smoothed(values)[-1] == 1.0


def test_the_title_names_the_run_its_objective_and_model():
    from types import SimpleNamespace

    from stable_rl.objectives import MiniRL

    trainer = SimpleNamespace(logger=SimpleNamespace(name="quickstart", version=3))
    module = SimpleNamespace(objective=MiniRL(), model_path="data/tiny-qwen3-moe-sft-format")
    assert run_title(trainer, module) == "quickstart/version_3: MiniRL on tiny-qwen3-moe-sft-format"
    assert run_title(SimpleNamespace(logger=None), SimpleNamespace()) == "run"
