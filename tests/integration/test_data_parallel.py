"""Data-parallel training (Lightning DDP or FSDP2, gloo, 2 CPU processes) makes the same updates as one
process on the same global batch: the normalising constant, the gradient average and the metrics are
global, each process holds its share of every mini-batch (and, with FSDP2, half of the weights)."""

import csv
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import quickstart_stack
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from transformers import AutoModelForCausalLM

SCRIPT = Path(__file__).with_name("data_parallel_fit.py")
REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def fit(tiny_model_path, tmp_path, devices: int, *extra: str) -> dict:
    out = tmp_path / f"devices{devices}.pt"
    command = [sys.executable, str(SCRIPT), tiny_model_path, str(out), "--devices", str(devices), *map(str, extra)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(out, weights_only=True)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
@pytest.mark.parametrize(
    "extra",
    [(), ("--mini", "8"), ("--replay", "R3"), ("--replay", "R2", "--mini", "8"), ("--objective", "CISPO")],
    ids=["on-policy", "two-mini-batches", "R3", "R2-two-mini-batches", "CISPO-per-token"],
)
def test_two_processes_make_the_updates_of_one(tiny_model_path, tmp_path, extra, strategy):
    one = fit(tiny_model_path, tmp_path, 1, *extra)
    two = fit(tiny_model_path, tmp_path, 2, "--strategy", strategy, *extra)
    assert two["share"] == pytest.approx(0.5 if strategy == "fsdp2" else 1.0, abs=0.01)  # rank 0's part of the weights
    start = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).state_dict()
    moved = [name for name, weight in one["weights"].items() if not torch.equal(weight, start[name])]
    assert len(moved) > len(start) // 2  # the updates did change the model
    for name, weight in one["weights"].items():
        torch.testing.assert_close(two["weights"][name], weight, rtol=1e-5, atol=1e-6, msg=name)
    for name in ("train/loss", "train/kl", "train/kl_k3", "train/entropy", "train/reward", "train/grad_norm"):
        torch.testing.assert_close(two["metrics"][name], one["metrics"][name], rtol=1e-5, atol=1e-7, msg=name)
    # over all processes' prompts: rank 0 alone holds only groups with signal, its partner one without
    assert one["metrics"]["train/groups_with_signal"] == two["metrics"]["train/groups_with_signal"] == 0.75
    if "--replay" in extra:
        assert one["metrics"]["train/routing/update_agreement"] == two["metrics"]["train/routing/update_agreement"]


@pytest.mark.parametrize("devices", [2, 1])
def test_fsdp2_mixed_precision_keeps_float32_weights_and_computes_in_bfloat16(tiny_model_path, tmp_path, devices):
    """dtype float32 + mixed_precision bfloat16 under FSDP2, from a bfloat16 checkpoint (as large models
    ship; rank 0 reads it and sends each process its shard, upcast): the weights stay float32 and take
    updates smaller than a bfloat16 weight's precision; the forward and backward ran in bfloat16 (gradient
    norm and KL agree with a float32 run's to bfloat16 precision, not to the 1e-6 that float32
    data-parallel runs agree to); HFExport gathers the shards into an HF model of the trained weights.
    On one device too: FSDP2 is how one GPU computes in bfloat16 over float32 weights (recipes/long/bf16.yaml)."""
    stored = tmp_path / "bfloat16-checkpoint"
    AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.bfloat16).save_pretrained(stored)
    full = fit(str(stored), tmp_path, 1)
    export = tmp_path / "export"
    mixed = fit(
        str(stored), tmp_path, devices, "--strategy", "fsdp2", "--mixed-precision", "bfloat16", "--export", export
    )
    assert mixed["dtypes"] == ["torch.float32"] and mixed["share"] == pytest.approx(1 / devices, abs=0.01)
    start = AutoModelForCausalLM.from_pretrained(stored, dtype=torch.float32).state_dict()
    below_bfloat16 = 0
    for name, weight in mixed["weights"].items():
        step = (weight - start[name]).abs()
        ulp = start[name].abs() * 2**-8  # the resolution of a bfloat16 weight of that size
        below_bfloat16 += int(((step > 0) & (step < ulp / 2)).sum())
    assert below_bfloat16 > 1000  # updates bfloat16 weights would have rounded away
    for name in ("train/grad_norm", "train/kl_k3"):  # the loss, a near-cancelling sum, is all rounding noise
        value, reference = mixed["metrics"][name], full["metrics"][name]
        assert value == pytest.approx(reference, rel=1e-2) and value != pytest.approx(reference, rel=1e-5), name
    exported = AutoModelForCausalLM.from_pretrained(export, dtype=torch.float32).state_dict()
    assert exported.keys() == mixed["weights"].keys()
    for name, weight in mixed["weights"].items():
        assert torch.equal(exported[name], weight), name


def quickstart(save_dir: Path, strategy: str | None, *extra: str, nodes: int = 1, processes: int = 2) -> Path:
    """The quickstart on ``processes`` CPU processes with ``strategy`` (each rolling out its share of the
    16 prompts with its own in-process vLLM engine unless they share one), or on one process (``strategy``
    None); returns the run's directory. ``nodes=2``: the processes are split over 2 nodes, started apart
    as a cluster would start them (NODE_RANK, MASTER_ADDR, MASTER_PORT; Lightning's ``num_nodes``)."""
    devices = f"--trainer.devices={processes // nodes}"
    processes = ["--trainer.devices=1"] if strategy is None else [strategy, devices]
    command = [
        *quickstart_stack.FIT,
        *(*processes, f"--trainer.num_nodes={nodes}", "--trainer.accelerator=cpu"),
        *("--trainer.limit_val_batches=0", "--trainer.enable_progress_bar=false", *extra),
        f"--trainer.logger.init_args.save_dir={save_dir}",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    if nodes > 1:
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free.getsockname()[1])}
    started = [
        subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env={**env, "NODE_RANK": str(n)},
        )
        for n in range(nodes)
    ]
    for run in started:
        _, stderr = run.communicate(timeout=600)
        assert run.returncode == 0, stderr[-3000:]
    return max((save_dir / "quickstart").iterdir())  # the latest version


def train_rows(run: Path, metric: str = "train/reward") -> dict[str, dict[str, str]]:
    """The logged rows that hold ``metric``, by step."""
    with open(run / "metrics.csv") as f:
        return {row["step"]: row for row in csv.DictReader(f) if row.get(metric)}


@pytest.mark.vllm
def test_fsdp2_on_one_process_computes_in_bfloat16_beside_a_vllm_engine(tmp_path):
    """FSDP2 on one device, as recipes/long/bf16.yaml runs on one GPU: the quickstart with its vLLM engine
    (synced from the gathered weights after each update) against the same run in float32. The first
    rollout is the same (the engine starts from the same checkpoint), so the first reward is equal; the
    policy computes in bfloat16 only under mixed precision, so only there does its log-prob of the engine's
    samples differ by more than float32 rounding (KL k3); the second step trains from the synced engine."""
    steps = ["--trainer.max_steps=2"]
    fsdp2 = "--trainer.strategy.class_path=stable_rl.strategies.FSDP2Strategy"
    full = train_rows(quickstart(tmp_path / "full", None, *steps))
    mixed_run = quickstart(tmp_path / "mixed", fsdp2, "--model.init_args.mixed_precision=bfloat16", *steps, processes=1)
    mixed = train_rows(mixed_run)
    assert list(full) == list(mixed) == ["0", "1"]
    assert mixed["0"]["train/reward"] == full["0"]["train/reward"]
    assert abs(float(full["0"]["train/kl_k3"])) < 1e-6 and float(mixed["0"]["train/kl_k3"]) > 1e-5


@pytest.mark.vllm
def test_the_quickstart_trains_with_two_processes_each_with_its_vllm_engine(tmp_path):
    """End to end with DDP: the run finishes (a rank-0-only collective once hung it at the end) and
    writes one report and the log of both steps."""
    run = quickstart(tmp_path, "--trainer.strategy=ddp", "--trainer.max_steps=2")
    assert (run / "report.png").is_file()
    assert list(train_rows(run)) == ["0", "1"]


@pytest.mark.vllm
def test_fsdp2_quickstart_resumes_exactly_from_its_sharded_checkpoint(tmp_path):
    """FSDP2 (weights, gradients and optimizer state sharded over 2 processes): a run stopped by max_steps
    after 2 steps and resumed from its sharded ``last.ckpt`` (one shard file per process) logs the third
    step exactly as a run of 3 steps, and ends with the same weights. Resumed with a lower learning rate, it
    trains at that rate (the strategy loads the sharded optimizer state straight into the optimizer: the
    configured settings are applied to it once training starts)."""
    fsdp2 = "--trainer.strategy.class_path=stable_rl.strategies.FSDP2Strategy"
    whole = quickstart(tmp_path / "whole", fsdp2, "--trainer.max_steps=3")
    stopped = quickstart(tmp_path / "resumed", fsdp2, "--trainer.max_steps=2")
    checkpoint = stopped / "checkpoints" / "last.ckpt"
    assert sorted(p.name for p in checkpoint.iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp", "meta.pt"]
    resumed = quickstart(tmp_path / "resumed", fsdp2, "--trainer.max_steps=3", f"--ckpt_path={checkpoint}")
    assert list(train_rows(resumed)) == ["2"]
    for name in ("train/reward", "train/loss", "train/grad_norm", "train/entropy", "train/kl_k3"):
        assert train_rows(resumed)["2"][name] == train_rows(whole)["2"][name], name
    weights = []
    for run in (whole, resumed):
        dcp_to_torch_save(run / "checkpoints" / "last.ckpt", run / "full.pt")
        weights.append(torch.load(run / "full.pt", weights_only=True)["state_dict"])
    assert weights[0].keys() == weights[1].keys() and len(weights[0]) > 40
    for name, weight in weights[0].items():
        assert torch.equal(weights[1][name], weight), name
    assert not list((resumed / "checkpoints").glob(".*"))  # no staging directory left
    lr_monitor = "--trainer.callbacks+=lightning.pytorch.callbacks.LearningRateMonitor"
    slower = quickstart(
        tmp_path / "slower", fsdp2, "--trainer.max_steps=3", f"--ckpt_path={checkpoint}", lr_monitor,
        "--model.init_args.optimizer.init_args.lr=5e-5",
    )  # fmt: skip
    assert {step: float(row["lr-AdamW"]) for step, row in train_rows(slower, "lr-AdamW").items()} == {"2": 5e-5}


@pytest.mark.vllm
def test_two_fsdp2_processes_sharing_a_tensor_parallel_vllm_engine_train_as_one_process(tmp_path):
    """vLLM tensor parallelism inside a data-parallel run: 2 FSDP2 processes share one vLLM engine of
    tensor_parallel_size 2 (each process a TP worker holding half of its weights, vLLM's external
    launcher), which samples all 16 prompts; each process trains on its 8. With R3 (routes captured in
    each worker), 2 steps (a weight sync into the sharded engine between them) log what one process with
    its own engine logs: the same samples (equal rewards) and the same update to float32 rounding. The
    validation before training (32 held-out problems x 4 samples, the same problems for both processes
    of the engine) gives the same avg@4 and pass@k."""
    r3 = ["--trainer.callbacks+=stable_rl.callbacks.RoutingReplay", "--trainer.callbacks.mode=R3"]
    steps = ["--trainer.max_steps=2", "--trainer.limit_val_batches=1", *r3]
    one_run = quickstart(tmp_path / "one", None, *steps)
    fsdp2 = "--trainer.strategy.class_path=stable_rl.strategies.FSDP2Strategy"
    tp = "--data.init_args.engine.init_args.tensor_parallel_size=2"
    two_run = quickstart(tmp_path / "two", fsdp2, tp, *steps)
    one, two = train_rows(one_run), train_rows(two_run)
    val_one, val_two = (train_rows(run, "val/heldout/avg@4") for run in (one_run, two_run))
    assert list(val_one) == list(val_two) == ["0"]
    for name in ("val/heldout/avg@4", "val/heldout/pass@1", "val/heldout/pass@4"):
        assert val_two["0"][name] == val_one["0"][name], name
    assert list(one) == list(two) == ["0", "1"]
    for step in one:
        assert two[step]["train/reward"] == one[step]["train/reward"], step
        assert two[step]["train/routing/update_agreement"] == one[step]["train/routing/update_agreement"] == "1.0"
        for name in ("train/grad_norm", "train/entropy", "train/response_length"):
            assert float(two[step][name]) == pytest.approx(float(one[step][name]), rel=1e-5), (step, name)
        # the loss nearly cancels (advantages sum to zero per group): float32 rounding of its O(1) terms (the
        # tensor-parallel engine's log mu differs from one engine's in the last bits; seen: 6.7e-8 at -0.006)
        assert float(two[step]["train/loss"]) == pytest.approx(float(one[step]["train/loss"]), abs=1e-6), step


@pytest.mark.vllm
def test_two_nodes_of_one_process_train_as_one_node_of_two(tmp_path):
    """Multi-node as a cluster launches it: each node started apart with its NODE_RANK and the main
    node's address, Lightning's num_nodes=2 (FSDP2 over both), logs what one node with 2 processes logs."""
    fsdp2 = "--trainer.strategy.class_path=stable_rl.strategies.FSDP2Strategy"
    one_node = train_rows(quickstart(tmp_path / "one", fsdp2, "--trainer.max_steps=2"))
    two_nodes = train_rows(quickstart(tmp_path / "two", fsdp2, "--trainer.max_steps=2", nodes=2))
    assert list(one_node) == list(two_nodes) == ["0", "1"]
    for step, row in one_node.items():
        for name in ("train/reward", "train/groups_with_signal", "train/loss", "train/grad_norm", "train/entropy"):
            assert two_nodes[step][name] == row[name], (step, name)


@pytest.mark.vllm
def test_four_fsdp2_processes_in_two_tensor_parallel_engine_groups_train_as_two_processes(tmp_path):
    """Several engine groups: 4 FSDP2 processes, processes 0-1 sharing one vLLM engine of tensor
    parallelism 2 and 2-3 another, independent of it (vLLM's external data parallelism), log what 2
    processes with an engine each log (the same seed streams and prompt shares): the same samples and
    the same updates to float32 rounding."""
    fsdp2 = "--trainer.strategy.class_path=stable_rl.strategies.FSDP2Strategy"
    two = train_rows(quickstart(tmp_path / "two", fsdp2, "--trainer.max_steps=2"))
    tp = "--data.init_args.engine.init_args.tensor_parallel_size=2"
    four = train_rows(quickstart(tmp_path / "four", fsdp2, tp, "--trainer.max_steps=2", processes=4))
    assert list(two) == list(four) == ["0", "1"]
    for step in two:
        assert four[step]["train/reward"] == two[step]["train/reward"], step
        assert four[step]["train/groups_with_signal"] == two[step]["train/groups_with_signal"], step  # over all ranks
        for name in ("train/grad_norm", "train/entropy", "train/response_length"):
            assert float(four[step][name]) == pytest.approx(float(two[step][name]), rel=1e-5), (step, name)
        # the loss nearly cancels (advantages sum to zero per group): float32 rounding of its O(1) terms
        assert float(four[step]["train/loss"]) == pytest.approx(float(two[step]["train/loss"]), abs=1e-6), step
