"""The atlas's runs in PROTOCOL.md Part 2's order, which are done, and what each cell's stack configures
(experiments/atlas/plan.py)."""

import contextlib
import importlib.util
import io
from pathlib import Path

import pytest
import yaml

from stable_rl.cli import main

ROOT = Path(__file__).parents[2]
spec = importlib.util.spec_from_file_location("atlas_plan", ROOT / "experiments/atlas/plan.py")
plan = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plan)


def test_the_control_then_the_core_matrix_top_down_until_the_core_decides_l_star():
    names = [cell.run_name(100) for cell in plan.cells(10)]
    assert names[:3] == ["l0_exact+lr3e-4-s100", "l7_noise0.3+lr3e-4-s100", "l7_noise0.3+lr3e-4+minirl_no_is-s100"]
    assert len(names) == 15 and names[-1] == "l1_bf16+lr3e-4+minirl_no_is-s100"


def test_every_cell_of_part_2_with_its_seeds_and_horizon():
    """15 core + 2 x 5 verdict arms + DPPO's 2 at L_M + 2 x 7 reported arms (6 seeds) + 2 x 8 off-policy + 2 cold
    starts = 59, then Part 3's 4 staleness cells at L2; every stack's files exist."""
    cells = plan.cells(8, "L5", "L7")
    assert len(cells) == 63 and len(set(cells)) == 63
    assert [c.run_name(100) for c in cells[-4:]] == [
        "l2_fp8+lr3e-4+k1-s100",
        "l2_fp8+lr3e-4+k1+minirl_no_is-s100",
        "l2_fp8+lr3e-4+k2-s100",
        "l2_fp8+lr3e-4+k2+minirl_no_is-s100",
    ]
    by_name = {cell.run_name(100): cell for cell in cells}
    assert by_name["l7_noise0.3+lr3e-4+dppo_kl-s100"].seeds == 8
    assert by_name["l5_noise0.15+lr3e-4+gspo_token-s100"].seeds == 6
    assert by_name["l5_noise0.15+lr3e-4+n16+r3-s100"].horizon == 896 and by_name["l2_fp8+lr3e-4+n4-s100"].horizon == 900
    assert "l2_fp8+lr3e-4+cold_start_b-s100" in by_name
    assert all((ROOT / c).is_file() for cell in cells for c in cell.configs())
    assert len(plan.cells(8, "L3", "L3")) == 61  # L_M at L* adds no DPPO cells


def test_a_run_is_done_at_its_horizon_or_after_two_cut_copies():
    control = plan.cells(6)[0]
    logged = {"l0_exact+lr3e-4-s100": [899], "l0_exact+lr3e-4-s101": [640], "l0_exact+lr3e-4-s102": [640, 700]}
    assert [seed for cell, seed in plan.pending([control], logged)] == [101, 103, 104, 105]


def test_an_off_policy_run_is_done_at_its_last_rollout():
    """A row of N updates logs the rollout's index: N = 16 reaches H = 896 at step 55 (16 x 56 - 1 = 895), N = 4
    H = 900 at step 224; step 223 is a cut run."""
    n16, n4 = (plan.Cell("L2", (f"experiments/atlas/recipes/offpolicy/n{n}.yaml",), 1) for n in (16, 4))
    n16_r3 = plan.Cell("L2", (*n16.overlays, "recipes/paper/r3.yaml"), 1, 896)
    assert [c.updates_per_row for c in (n16, n16_r3, n4, plan.cells(6)[0])] == [16, 16, 4, 1]
    logged = {n16_r3.run_name(100): [55], n4.run_name(100): [223]}
    assert plan.pending([n16_r3, n4], logged) == [(n4, 100)]


@pytest.mark.parametrize(
    ("level", "overlays", "expected"),
    [
        (
            "L5",
            ("experiments/atlas/recipes/offpolicy/n16.yaml", "recipes/paper/r3.yaml"),
            {"max_steps": 896, "prompts_per_step": 256, "mini_batch_size": 128, "weight_noise": 0.15, "R3": True},
        ),
        ("L2", ("recipes/corrections/dppo_kl.yaml",), {"max_steps": 900, "quantization": "fp8_per_tensor"}),
        ("L0", (), {"max_steps": 900, "prompts_per_step": 16, "weight_noise": 0.0, "R3": False, "max_staleness": 0}),
        (
            "L2",
            ("experiments/atlas/recipes/staleness/k2.yaml", "recipes/paper/minirl_no_is.yaml"),
            {"max_steps": 900, "quantization": "fp8_per_tensor", "max_staleness": 2, "train_infer_is": False},
        ),
    ],
    ids=["n16-r3-L5", "dppo_kl-L2", "control", "staleness-k2-no-is-L2"],
)
def test_a_cells_stack_sets_what_part_2_says(monkeypatch, level, overlays, expected):
    """The rate 3e-4 with no schedule in every cell, and each stack's own settings."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr("sys.argv", ["stable-rl"])
    cell = plan.Cell(level, overlays, 6)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        main(["fit", *(f"--config={c}" for c in cell.configs()), "--print_config"])
    config = yaml.safe_load(out.getvalue())
    model, data = config["model"]["init_args"], config["data"]["init_args"]
    assert model["optimizer"]["init_args"]["lr"] == 3e-4 and model["lr_scheduler"] is None
    assert config["trainer"]["max_steps"] == expected["max_steps"]
    engine = data["engine"]["init_args"]
    for key in ("prompts_per_step", "mini_batch_size", "max_staleness"):
        if key in expected:
            assert data[key] == expected[key]
    for key in ("weight_noise", "quantization"):
        if key in expected:
            assert engine[key] == expected[key]
    if "train_infer_is" in expected:
        assert model["objective"]["init_args"]["train_infer_is"] == expected["train_infer_is"]
    if "R3" in expected:
        modes = [
            c["init_args"].get("mode") for c in config["trainer"]["callbacks"] if "RoutingReplay" in c["class_path"]
        ]
        assert modes == (["R3"] if expected["R3"] else [])
