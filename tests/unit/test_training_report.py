"""TrainingReport's figure: one panel per curve, the KL with and without routing replay together."""

from stable_rl.callbacks import TrainingReport


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
