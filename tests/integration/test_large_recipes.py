"""The GPU recipes are not run here (recipes/gpu ran on an H100: benchmarks/RESULTS.md): they parse into
the real objects (on CPU instead of GPUs), and the multi-node recipe's (recipes/large/qwen3_30b_a3b.yaml)
sizes pass the checks a run makes, on every process, for the paper's N = 1, 2, 4, 8. So do the stability
frontier's recipes (recipes/frontier)."""

import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from lightning.pytorch.callbacks import LearningRateMonitor, Timer
from torch.optim.lr_scheduler import ExponentialLR

from stable_rl.batch_plan import BatchPlan
from stable_rl.callbacks import HFExport, InstabilityMonitor, RoutingReplay
from stable_rl.cli import main
from stable_rl.data.prompt_batches import PromptBatches
from stable_rl.data.verifier import MathVerifier
from stable_rl.objectives import MiniRL
from stable_rl.rollout import VLLMEngine
from stable_rl.strategies import FSDP2Strategy

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "large" / "qwen3_30b_a3b.yaml"


@pytest.fixture
def in_repo(monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.setattr("sys.argv", ["stable-rl"])


def build(*extra: str):
    launch = shlex.split(RECIPE.read_text().splitlines()[0].removeprefix("# stable-rl "))
    assert launch[:2] == ["fit", "--config"] and launch[2] == "recipes/large/qwen3_30b_a3b.yaml"
    return main([*launch[1:3], "--trainer.accelerator=cpu", *extra], run=False)


def test_the_recipe_builds_the_papers_setting(in_repo):
    cli = build()
    model, data, trainer = cli.model, cli.datamodule, cli.trainer
    assert isinstance(trainer.strategy, FSDP2Strategy) and trainer.num_nodes == 4 and trainer.world_size == 32
    assert isinstance(model.objective, MiniRL) and (model.objective.eps_low, model.objective.eps_high) == (0.2, 0.27)
    assert model.objective.is_cap == 5.0 and model.runtime.gradient_checkpointing
    assert (model.dtype_name, model.mixed_precision) == ("float32", "bfloat16")  # bf16 compute, fp32 AdamW
    assert [c.mode for c in trainer.callbacks if isinstance(c, RoutingReplay)] == ["R3"]
    engine = data.engine
    assert isinstance(engine, VLLMEngine) and engine.fp8_scheme == "fp8_per_tensor" and engine.tensor_parallel_size == 1
    assert (data.prompts_per_step, data.group_size, data.mini_batch_size) == (64, 16, 1024)  # B, G, B x G
    assert engine.sampling.max_new_tokens + data.max_prompt_tokens == 32768 and data.eval_samples == 32


@pytest.mark.parametrize("n", [1, 2, 4, 8])
@pytest.mark.parametrize("nodes", [4, 2])
def test_every_process_gets_whole_groups_and_even_batches_for_each_n(in_repo, n, nodes):
    cli = build(f"--data.init_args.prompts_per_step={64 * n}", f"--trainer.num_nodes={nodes}")
    data, trainer = cli.datamodule, cli.trainer
    world, engine = trainer.world_size, data.engine
    global_batch = data.prompts_per_step * data.group_size
    assert global_batch // data.mini_batch_size == n
    sizes = (data.mini_batch_size, data.micro_batch_size)
    data.plan = plan = BatchPlan(
        data.prompts_per_step, data.group_size, *sizes, world, engine.tensor_parallel_size, trainer.num_devices
    )  # as RolloutDataModule.setup builds it
    assert (plan.mini_rows, plan.micro_rows) == (data.mini_batch_size // world, data.micro_batch_size)
    taken = []
    for process in range(world):
        engine.place(plan, process, process % trainer.num_devices)
        shared = engine.processes_per_engine
        assert shared == 1 and process == engine.rank  # one engine per process (R3 with vLLM >= 0.32)
        data.trainer = SimpleNamespace(global_rank=process, world_size=world)
        engine_share = PromptBatches(list(range(4096)), plan, 0, process)
        problems = next(iter(engine_share))
        own, samples = data._own_part(problems, [(p, j) for p in problems for j in range(data.group_size)])
        assert len(own) * world == data.prompts_per_step and samples == [(p, j) for p in own for j in range(16)]
        taken.append(own)
    assert sorted(p for own in taken for p in own) == sorted(
        next(iter(PromptBatches(list(range(4096)), BatchPlan(data.prompts_per_step, data.group_size), 0)))
    )
    assert trainer.num_devices % engine.tensor_parallel_size == 0  # a vLLM engine never spans two nodes
    checkpoints = [c for c in trainer.callbacks if type(c).__name__ == "ModelCheckpoint"]
    assert all(c._every_n_train_steps % n == 0 for c in checkpoints)  # at global-step boundaries
    assert trainer.max_steps % n == 0


def test_the_gpu_recipes_build(in_repo):
    """recipes/gpu: MiniRL + R3 from bfloat16 vLLM rollouts with CUDA graphs; the overlay makes them FP8."""
    base = ["--config=recipes/gpu/minirl_r3.yaml", "--trainer.accelerator=cpu"]
    cli = main(base, run=False)
    engine = cli.datamodule.engine
    assert [c.mode for c in cli.trainer.callbacks if isinstance(c, RoutingReplay)] == ["R3"]
    assert isinstance(engine, VLLMEngine) and engine.dtype == "bfloat16" and not engine.enforce_eager
    assert engine.fp8_scheme is None and cli.trainer.max_steps >= 50
    fp8 = main([*base, "--config=recipes/gpu/fp8.yaml"], run=False).datamodule.engine
    assert fp8.fp8_scheme == "fp8_per_tensor" and fp8.dtype == "bfloat16" and not fp8.enforce_eager


def test_the_gpu_mismatch_ladder_stacks_real_vllm_rungs(in_repo, monkeypatch):
    """benchmarks/ladder_in_training.py --gpu: the bfloat16 engine, FP8 weights and activations, an FP8 KV
    cache and both, each on recipes/gpu/minirl_r3.yaml (R3, so the routing agreement is logged)."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from ladder_in_training import fit_args, recipes

    engines = []
    for stack in recipes(gpu=True):
        configs = [f"--config={c}" for c in stack.split()]
        cli = main([*configs, *fit_args(20, gpu=True), "--trainer.accelerator=cpu"], run=False)
        assert [c.mode for c in cli.trainer.callbacks if isinstance(c, RoutingReplay)] == ["R3"]
        assert cli.trainer.max_steps == 20
        engine = cli.datamodule.engine
        engines.append((type(engine), engine.dtype, engine.fp8_scheme, engine.kv_cache_dtype))
        assert engine.gpu_memory_utilization == 0.1  # four engines share the GPU with other work
        assert engine.kv_cache_memory_bytes == 1 << 30  # no memory profiling while the others sleep and wake
    vllm = (VLLMEngine, "bfloat16")
    assert engines == [
        (*vllm, None, "auto"),
        (*vllm, "fp8_per_tensor", "auto"),
        (*vllm, None, "fp8"),
        (*vllm, "fp8_per_tensor", "fp8"),
    ]


@pytest.mark.parametrize(
    ("overlays", "dtype", "scheme", "train_infer_is", "length_norm", "replay", "kv_cache"),
    [
        ([], "bfloat16", "fp8_per_tensor", True, False, [], "auto"),
        (
            ["recipes/paper/minirl_no_is.yaml", "recipes/paper/r3.yaml"],
            "bfloat16",
            "fp8_per_tensor",
            False,
            False,
            ["R3"],
            "auto",
        ),
        (["recipes/paper/minirl_length_norm.yaml"], "bfloat16", "fp8_per_tensor", True, True, [], "auto"),
        (["recipes/frontier/exact.yaml"], "float32", None, True, False, [], "auto"),
        (
            ["recipes/paper/r3.yaml", "recipes/frontier/fp8_kv.yaml"],
            "bfloat16",
            "fp8_per_tensor",
            True,
            False,
            ["R3"],
            "fp8",
        ),
    ],
)
def test_the_frontier_recipes_build(in_repo, overlays, dtype, scheme, train_infer_is, length_norm, replay, kv_cache):
    """recipes/frontier: a learning-rate ramp x2 per 20 updates, stopped by the collapse criterion; the
    grid's overlays make the variants, exact.yaml the float32 control."""
    args = ["--config=recipes/frontier/onpolicy_fp8.yaml", *(f"--config={o}" for o in overlays)]
    cli = main([*args, "--trainer.accelerator=cpu"], run=False)
    engine, module = cli.datamodule.engine, cli.model
    assert (engine.dtype, engine.fp8_scheme, engine.kv_cache_dtype) == (dtype, scheme, kv_cache)
    assert (module.objective.train_infer_is, module.objective.length_norm) == (train_infer_is, length_norm)
    assert [c.mode for c in cli.trainer.callbacks if isinstance(c, RoutingReplay)] == replay
    (monitor,) = [c for c in cli.trainer.callbacks if isinstance(c, InstabilityMonitor)]
    assert monitor.stop and monitor.thresholds == {
        "min_entropy": 0.02,
        "max_entropy": 1.5,
        "max_kl": 0.05,
        "reward_drop": 0.5,
        "max_skipped_updates": 0.0,
    }
    assert any(isinstance(c, LearningRateMonitor) for c in cli.trainer.callbacks)
    optimizer = torch.optim.AdamW(torch.nn.Linear(1, 1).parameters(), lr=1.0)
    scheduler = module.lr_scheduler_factory(optimizer)
    assert isinstance(scheduler, ExponentialLR) and scheduler.gamma**20 == pytest.approx(2.0, rel=1e-12)


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_the_off_policy_frontiers_keep_the_ramp_per_global_step(in_repo, n):
    """recipes/frontier/n{2,4,8,16}.yaml: N updates of 128 / N responses per global step of 16 x 8, the ramp
    x2 per 20 N updates (20 global steps, as on-policy) over 200 global steps."""
    stack = ["--config=recipes/frontier/onpolicy_fp8.yaml", "--config=recipes/paper/r2.yaml"]
    cli = main([*stack, f"--config=recipes/frontier/n{n}.yaml", "--trainer.accelerator=cpu"], run=False)
    module, data = cli.model, cli.datamodule
    assert data.prompts_per_step * data.group_size == 128
    assert (data.mini_batch_size, cli.trainer.max_steps) == (128 // n, 200 * n)
    assert [c.mode for c in cli.trainer.callbacks if isinstance(c, RoutingReplay)] == ["R2"]  # the arm survives
    optimizer = module.optimizer_factory(torch.nn.Linear(1, 1).parameters())
    assert optimizer.defaults["lr"] == 1e-4
    assert module.lr_scheduler_factory(optimizer).gamma ** (20 * n) == pytest.approx(2.0, rel=1e-12)


LONG = "--config=recipes/long/minirl_smollm2_moe.yaml"


@pytest.mark.parametrize(
    ("overlays", "scheme", "replay", "mini_batch_size", "max_steps"),
    [
        ([], None, [], None, 256),
        (["recipes/long/fp8.yaml", "recipes/long/r3.yaml"], "fp8_per_tensor", ["R3"], None, 256),
        (["recipes/long/n4_r2.yaml"], None, ["R2"], 64, 1024),
    ],
)
def test_the_long_task_recipes_build(
    in_repo, upcycled_smollm2_path, overlays, scheme, replay, mini_batch_size, max_steps
):
    """recipes/long (GPU recipes, built here on CPU): MiniRL on the upcycled SmolLM2 MoE, responses of hundreds of tokens from a fixed pool."""
    args = [LONG, *(f"--config={o}" for o in overlays), "--trainer.accelerator=cpu"]
    cli = main([*args, f"--model.init_args.model_path={upcycled_smollm2_path}"], run=False)
    data, engine, module = cli.datamodule, cli.datamodule.engine, cli.model
    assert (engine.dtype, engine.fp8_scheme, engine.sampling.max_new_tokens) == ("bfloat16", scheme, 768)
    assert [c.mode for c in cli.trainer.callbacks if isinstance(c, RoutingReplay)] == replay
    assert (data.mini_batch_size, cli.trainer.max_steps, module.objective.clip) == (mini_batch_size, max_steps, True)
    assert (data.prompts.generators, data.prompts.size, data.prompts_per_step, data.group_size) == (
        ["chain_sum"],
        2048,
        32,
        8,
    )
    checkpoints = [c for c in cli.trainer.callbacks if type(c).__name__ == "ModelCheckpoint"]
    assert all(c._every_n_train_steps % (max_steps // 256) == 0 for c in checkpoints)


def test_the_long_task_cold_start_builds_on_the_rl_task(in_repo, upcycled_smollm2_path):
    """The cold start teaches place-value solutions of the RL pool's difficulty, on problems far from its seeds."""
    cli = main(
        [
            "--config=recipes/long/cold_start_sft_smollm2_moe.yaml",
            "--trainer.accelerator=cpu",
            f"--model.init_args.model_path={upcycled_smollm2_path}",
        ],
        run=False,
    )
    rl = main([LONG, "--trainer.accelerator=cpu", f"--model.init_args.model_path={upcycled_smollm2_path}"], run=False)
    sft, pool, heldout = cli.datamodule.prompts, rl.datamodule.prompts, rl.datamodule.eval_sets["heldout"]
    assert cli.datamodule.by_place and sft.generators == pool.generators == heldout.generators == ["chain_sum"]
    assert (
        sft.difficulty
        == pool.difficulty
        == heldout.difficulty
        == dict(min_terms=6, max_terms=8, min_digits=2, max_digits=3)
    )
    assert sft.seed + sft.size <= pool.seed and pool.seed + pool.size <= heldout.seed
    assert cli.trainer.max_steps * cli.datamodule.batch_size == sft.size - cli.datamodule.val_size  # one epoch
    (export,) = [c for c in cli.trainer.callbacks if isinstance(c, HFExport)]
    rl_recipe = yaml.safe_load((REPO / LONG.removeprefix("--config=")).read_text())
    assert rl_recipe["model"]["init_args"]["model_path"] == str(export.dirpath) == "data/smollm2-135m-moe-sft"


def test_the_long_format_error_cold_start_ends_half_its_solutions_unboxed(in_repo, upcycled_smollm2_path):
    """`bash experiments/long-task/run_cold_start.sh --data.init_args.unboxed_fraction=0.5` (experiments/long-task/README.md): about half
    of the worked solutions end "The answer is N." instead of \\boxed{N}, which the RL verifier scores 0, the
    rest as before, scored 1: format errors for RL to correct, as the tiny quickstart's cold start has."""
    stack = ["--config=recipes/long/cold_start_sft_smollm2_moe.yaml", "--trainer.accelerator=cpu"]
    given = [
        "--data.init_args.unboxed_fraction=0.5",
        "--data.init_args.prompts.init_args.size=64",
        "--data.init_args.val_size=8",
    ]
    cli = main([*stack, f"--model.init_args.model_path={upcycled_smollm2_path}", *given], run=False)
    data = cli.datamodule
    data.setup("fit")
    texts = [data.tokenizer.decode(response, skip_special_tokens=True) for _, response in data.pairs]
    answers = [row["answer"] for row in data.prompts.rows()]
    unboxed = [text.endswith(f"The answer is {answer}.") for text, answer in zip(texts, answers, strict=True)]
    assert len(texts) == 64 and 20 <= sum(unboxed) <= 44
    assert all(u != text.endswith(f"\\boxed{{{a}}}") for u, text, a in zip(unboxed, texts, answers, strict=True))
    rewards, _ = MathVerifier().score(texts, answers)
    assert rewards.tolist() == [0.0 if u else 1.0 for u in unboxed]


@pytest.mark.parametrize(
    ("overlays", "dtype", "scheme", "train_infer_is"),
    [
        ([], "bfloat16", "fp8_per_tensor", True),
        (["recipes/paper/minirl_no_is.yaml"], "bfloat16", "fp8_per_tensor", False),
        (["recipes/long/exact.yaml"], "float32", None, True),
    ],
)
def test_the_long_frontier_recipes_build(in_repo, upcycled_smollm2_path, overlays, dtype, scheme, train_infer_is):
    """recipes/long/frontier.yaml: the long task's ramp x2 per 4 updates from 8e-6, 16 x 8 responses of up to
    640 tokens, three runs sharing a GPU for 10 minutes of training each; exact.yaml the float32 control."""
    args = [LONG, "--config=recipes/long/frontier.yaml", *(f"--config={o}" for o in overlays)]
    cli = main([*args, "--trainer.accelerator=cpu", f"--model.init_args.model_path={upcycled_smollm2_path}"], run=False)
    data, engine, module = cli.datamodule, cli.datamodule.engine, cli.model
    assert (engine.dtype, engine.fp8_scheme, engine.sampling.max_new_tokens) == (dtype, scheme, 640)
    assert (engine.gpu_memory_utilization, engine.kv_cache_memory_bytes) == (0.1, 3 * 2**30)
    assert (data.prompts_per_step, data.group_size, data.prompts.size) == (16, 8, 2048)
    assert (module.objective.train_infer_is, module.max_grad_norm, data.micro_batch_size) == (
        train_infer_is,
        100.0,
        4,
    )
    (timer,) = [c for c in cli.trainer.callbacks if isinstance(c, Timer)]
    assert (cli.trainer.max_steps, timer._duration) == (48, 600.0)
    (monitor,) = [c for c in cli.trainer.callbacks if isinstance(c, InstabilityMonitor)]
    assert (monitor.stop, monitor.window, monitor.patience, monitor.thresholds["min_entropy"]) == (True, 3, 2, 0.0005)
    assert not any(isinstance(c, RoutingReplay) for c in cli.trainer.callbacks)
    optimizer = module.optimizer_factory(torch.nn.Linear(1, 1).parameters())
    scheduler = module.lr_scheduler_factory(optimizer)
    assert optimizer.defaults["lr"] == 8e-6 and isinstance(scheduler, ExponentialLR)
    assert scheduler.gamma**4 == pytest.approx(2.0, rel=1e-12)


def test_the_long_fixed_rate_probe_keeps_one_rate(in_repo, upcycled_smollm2_path):
    """recipes/long/fixed_lr.yaml: the frontier's settings with a constant rate (2e-6, or the one given, as
    experiments/long-task/run_fixed_lr.sh gives it), at most one pass over the pool and 15 minutes, held-out reward every 8 steps; the
    float32 control stacks after it."""
    stack = [LONG, "--config=recipes/long/frontier.yaml", "--config=recipes/long/fixed_lr.yaml"]
    path = f"--model.init_args.model_path={upcycled_smollm2_path}"
    for given, rate in (([], 2e-6), (["--model.init_args.optimizer.init_args.lr=4e-6"], 4e-6)):
        cli = main([*stack, "--trainer.accelerator=cpu", path, *given], run=False)
        optimizer = cli.model.optimizer_factory(torch.nn.Linear(1, 1).parameters())
        scheduler = cli.model.lr_scheduler_factory(optimizer)
        for _ in range(3):
            optimizer.step()
            scheduler.step()
        assert optimizer.param_groups[0]["lr"] == rate
    (timer,) = [c for c in cli.trainer.callbacks if isinstance(c, Timer)]
    assert (cli.trainer.max_steps, timer._duration, cli.trainer.val_check_interval) == (128, 900.0, 8)
    assert cli.datamodule.engine.fp8_scheme == "fp8_per_tensor" and cli.model.max_grad_norm == 100.0
    control = main([*stack, "--config=recipes/long/exact.yaml", "--trainer.accelerator=cpu", path], run=False)
    engine = control.datamodule.engine
    assert (engine.dtype, engine.fp8_scheme, control.trainer.max_steps) == ("float32", None, 128)


def test_the_long_bf16_overlay_computes_in_bfloat16_over_float32_weights(in_repo, upcycled_smollm2_path):
    """recipes/long/bf16.yaml on the fixed-rate stack: FSDP2 on the one device (its mixed precision), float32
    weights, bfloat16 compute, vLLM in bfloat16 without FP8; the rate and the rest of the stack unchanged."""
    stack = [LONG, "--config=recipes/long/frontier.yaml", "--config=recipes/long/fixed_lr.yaml"]
    path = f"--model.init_args.model_path={upcycled_smollm2_path}"
    cli = main([*stack, "--config=recipes/long/bf16.yaml", "--trainer.accelerator=cpu", path], run=False)
    assert isinstance(cli.trainer.strategy, FSDP2Strategy) and cli.trainer.world_size == 1
    assert (cli.model.dtype_name, cli.model.mixed_precision) == ("float32", "bfloat16")
    engine = cli.datamodule.engine
    assert (engine.dtype, engine.fp8_scheme) == ("bfloat16", None)
    optimizer = cli.model.optimizer_factory(torch.nn.Linear(1, 1).parameters())
    assert optimizer.defaults["lr"] == 2e-6 and cli.model.max_grad_norm == 100.0 and cli.trainer.max_steps == 128
    usual = cli.datamodule.eval_sets["heldout"]
    planned = [  # the next learning run's FIT_ARGS (experiments/long-task/README.md): 512 held-out problems, 128 a call
        "--data.init_args.micro_batch_size=16",
        "--data.init_args.eval_sets.heldout.init_args.size=512",
        "--data.init_args.eval_prompts_per_batch=64",
        "--trainer.val_check_interval=32",
    ]
    cli = main([*stack, "--config=recipes/long/bf16.yaml", "--trainer.accelerator=cpu", path, *planned], run=False)
    larger, data = cli.datamodule.eval_sets["heldout"], cli.datamodule
    assert (larger.size, data.eval_prompts_per_batch * data.eval_samples, cli.trainer.val_check_interval) == (
        512,
        128,
        32,
    )
    assert larger.rows()[:128] == usual.rows()  # the same seed: the 128 problems every earlier run was judged on


@pytest.mark.parametrize(
    ("arm", "clip", "replay", "dtype"),
    [
        ([], True, [], "bfloat16"),
        (["recipes/paper/noclip.yaml"], False, [], "bfloat16"),
        (["recipes/paper/r3.yaml"], True, ["R3"], "bfloat16"),
        (["recipes/long/exact.yaml"], True, [], "float32"),
    ],
)
def test_the_long_n8_frontier_keeps_the_ramp_per_global_step(in_repo, upcycled_smollm2_path, arm, clip, replay, dtype):
    """recipes/long/n8.yaml: 8 updates of 16 responses per global step of 16 x 8, the ramp x2 per 32 updates
    (4 global steps, as on-policy) from 4e-6, 48 global steps; the arm before it sets clipping and replay."""
    stack = [
        LONG,
        "--config=recipes/long/frontier.yaml",
        *(f"--config={a}" for a in arm),
        "--config=recipes/long/n8.yaml",
    ]
    cli = main(
        [*stack, "--trainer.accelerator=cpu", f"--model.init_args.model_path={upcycled_smollm2_path}"], run=False
    )
    module = cli.model
    assert (cli.datamodule.mini_batch_size, cli.trainer.max_steps, module.objective.clip) == (16, 384, clip)
    assert [c.mode for c in cli.trainer.callbacks if isinstance(c, RoutingReplay)] == replay
    assert cli.datamodule.engine.dtype == dtype
    optimizer = module.optimizer_factory(torch.nn.Linear(1, 1).parameters())
    assert (optimizer.defaults["lr"], optimizer.defaults["weight_decay"]) == (4e-6, 0.0)  # half on-policy's start
    assert module.lr_scheduler_factory(optimizer).gamma ** 32 == pytest.approx(2.0, rel=1e-12)
