"""The runs of the stable-rl vs TRL benchmarks (``trl_comparison.py`` on CPU, ``gpu_trl_comparison.py`` on a
GPU), one per child process: stable-rl's ``fit`` and TRL's ``GRPOTrainer`` on one workload, each returning one
record per global step (see ``STEP_KEYS``), also handed to ``step_done`` as each step ends."""

import os
import tempfile
import time
from collections.abc import Callable

from stable_rl.timing import timed

# Per global step, on both sides: wall seconds (None for the first step), seconds generating (the engine's
# generate call), seconds of the rollout phase (from the weight sync to the rewards, policy forwards
# excluded: stable-rl's time/sync + rollout + sleep + reward; TRL's ``_generate_and_score_completions`` less
# its no-grad log-prob forward), the responses trained on, the mean and the longest response (tokens), the
# real tokens (prompt + response, no padding) of the step's sequences, the tokens the update's forwards
# compute (rows x padded width, summed over forwards, no-grad ones included), the number of those forwards,
# and the training signals.
STEP_KEYS = (
    "seconds",
    "rollout",
    "rollout_phase",
    "rows",
    "response_mean",
    "response_max",
    "real_tokens",
    "padded_tokens",
    "forwards",
    "reward",
    "loss",
    "grad_norm",
)


def pin(threads: int) -> None:
    """This process on cores 0..threads-1 with that many torch threads (the parent sets OMP_NUM_THREADS
    and vLLM's VLLM_CPU_OMP_THREADS_BIND to the same cores)."""
    import torch

    os.sched_setaffinity(0, set(range(threads)))
    torch.set_num_threads(threads)


def optimizer_of(optimizer) -> dict:
    """Class and implementation switches of a torch optimizer (unwrapping accelerate's wrapper)."""
    inner = getattr(optimizer, "optimizer", optimizer)
    groups = inner.param_groups  # lr and weight decay: per group (the Trainer sets them there)
    return {
        "class": f"{type(inner).__module__}.{type(inner).__name__}",
        **{k: sorted({str(g[k]) for g in groups}) for k in ("lr", "weight_decay", "betas", "eps", "foreach", "fused")},
    }


# A step's record and the optimizer's (``optimizer_of``), handed over as the step ends.
StepDone = Callable[[dict, dict], None]
ROLLOUT_PHASES = ("sync", "rollout", "sleep", "reward")  # stable-rl's time/ phases before the update


def fit_args(workload: dict, steps: int, config: list[str], engine: str | None = None) -> list[str]:
    """``stable-rl fit``'s arguments: the recipe with the workload's overrides for ``steps`` global steps,
    validation, checkpoints and logging off; ``engine``: another rollout engine class than the recipe's."""
    args = [
        *(f"--config={c}" for c in config),
        f"--trainer.max_steps={steps}",
        "--trainer.limit_val_batches=0",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_checkpointing=false",
        "--trainer.callbacks=[]",
        "--trainer.logger=false",
        f"--model.init_args.model_path={workload['model_path']}",
        f"--model.init_args.dtype={workload['dtype']}",
        f"--data.init_args.micro_batch_size={workload['micro_batch_size']}",
        f"--data.init_args.prompts_per_step={workload['prompts']}",
    ]
    if engine:  # the recipe's engine arguments (max_new_tokens, temperature, dtype) carry over
        args.append(f"--data.init_args.engine.class_path={engine}")
    args.append(f"--data.init_args.engine.init_args.max_new_tokens={workload['max_tokens']}")
    return args


def run_stable_rl(
    workload: dict,
    steps: int,
    config: list[str],
    engine: str | None = None,
    overrides: list[str] | None = None,
    step_done: StepDone | None = None,
) -> dict:
    """``stable-rl fit`` with ``fit_args`` and then ``overrides`` (more ``stable-rl fit`` arguments)."""
    import lightning as L
    import torch

    from benchmarks._fit import fit_with

    class Probe(L.Callback):
        def __init__(self) -> None:
            self.steps: list[dict] = []
            self.batch: dict = {}
            self.optimizer: dict = {}

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            # the forwards PolicyModule.training_step makes: pi_old for mini-batches 2..N, then each
            # mini-batch's update, in length-sorted micro-batches each cut to its longest row
            plan = batch.plan
            mini, micro, rows = plan.mini_rows, plan.micro_rows, batch.num_rows
            parts = [p for _, p in batch.rows(slice(mini, None)).length_sorted_parts(micro)] if rows > mini else []
            for start in range(0, rows, mini):
                parts += [p for _, p in batch.rows(slice(start, start + mini)).length_sorted_parts(micro)]
            lengths = batch.response_mask.sum(-1)
            self.batch = {
                "rows": rows,
                "response_mean": float(lengths.float().mean()),
                "response_max": int(lengths.max()),
                "real_tokens": int(batch.attention_mask.sum()),
                "padded_tokens": sum(p.input_ids.numel() for p in parts),
                "forwards": len(parts),
            }
            self.optimizer = self.optimizer or optimizer_of(trainer.optimizers[0])

        def on_train_batch_end(self, trainer, *args) -> None:
            m = trainer.callback_metrics
            step = dict(self.batch)
            step.update({k: float(m[f"train/{k}"]) for k in ("reward", "loss", "grad_norm")})
            step["rollout"] = float(m["time/rollout"])
            step["phases"] = {phase: float(m[f"time/{phase}"]) for phase in ROLLOUT_PHASES}  # each, for the record
            step["rollout_phase"] = sum(step["phases"].values())
            step["seconds"] = float(m["time/step"]) if "time/step" in m else None  # from the second step on
            self.steps.append(step)
            if step_done is not None:
                step_done(step, self.optimizer)

    probe = Probe()
    fit_with(probe, fit_args(workload, steps, config, engine) + (overrides or []))
    return {"steps": probe.steps, "optimizer": probe.optimizer, "threads": torch.get_num_threads()}


def trl_dataset(workload: dict, steps: int, tokenizer):
    """stable-rl's training prompts, rendered with its template, in the order its first epoch draws them."""
    import importlib

    from datasets import Dataset

    from stable_rl.batch_plan import BatchPlan
    from stable_rl.data import PromptTemplate
    from stable_rl.data.prompt_batches import PromptBatches

    prompts, spec = workload["prompts"], workload["prompt_source"]
    module, _, name = spec["class_path"].rpartition(".")
    problems = getattr(importlib.import_module(module), name)(**spec.get("init_args", {})).load()
    order = PromptBatches(problems, BatchPlan(prompts, group_size=1), workload["seed"]).order(0)[: prompts * steps]
    rows = []
    for i in order:
        ids = PromptTemplate().encode(tokenizer, problems[i].question)
        text = tokenizer.decode(ids)
        if tokenizer(text=text)["input_ids"] != ids:  # what TRL does to a plain-text prompt
            raise RuntimeError(f"prompt {text!r} does not re-tokenize to stable-rl's prompt ids")
        rows.append({"prompt": text, "answer": problems[i].answer})
    return Dataset.from_list(rows)


def trl_settings(workload: dict, steps: int, out: str, loss: dict, options: dict) -> dict:
    """TRL's ``GRPOConfig`` arguments for the workload: one optimizer step per prompts x G responses in
    forwards of ``micro_batch_size`` rows, torch.optim.AdamW as stable-rl's recipe builds it, the rest TRL's
    defaults except where they would change the workload, then ``loss`` (TRL's loss settings) and ``options``
    (the device's: how TRL generates, precision)."""
    responses = workload["prompts"] * workload["group_size"]
    per_device = min(workload["micro_batch_size"], responses)
    if responses % per_device:
        raise ValueError(f"{responses} responses per step are not a multiple of {per_device} rows per forward")
    return {
        "output_dir": out,
        "max_steps": steps,
        "per_device_train_batch_size": per_device,  # rows per forward/backward, as stable-rl's micro_batch_size
        "gradient_accumulation_steps": responses // per_device,  # one optimizer step per prompts x G responses
        "num_generations": workload["group_size"],
        "max_completion_length": workload["max_tokens"],
        "temperature": workload["temperature"],
        "top_p": 1.0,
        "top_k": 0,  # as stable-rl's engines: the full distribution
        "learning_rate": workload["lr"],
        "lr_scheduler_type": "constant",
        "warmup_steps": 0,
        "optim": "adamw_torch",  # torch.optim.AdamW, foreach/fused unset, as stable-rl's recipe (TRL: fused)
        "weight_decay": workload["weight_decay"],
        "max_grad_norm": workload["max_grad_norm"],
        "shuffle_dataset": False,
        "seed": workload["seed"],
        "gradient_checkpointing": False,  # TRL's default is on; stable-rl's recipe has it off
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "disable_tqdm": True,
        **loss,
        **options,
    }


def push_checkpoint_layout(generation, model_path: str) -> None:
    """Make TRL's colocated weight push send the checkpoint's on-disk layout, as stable-rl's does.

    TRL (1.16) pushes ``model.named_parameters()`` as they are in memory; transformers 5 fuses an MoE's
    experts there (``mlp.experts.gate_up_proj``). Where vLLM's loaders fail on them (vllm-cpu 0.32:
    ``'Parameter' object has no attribute 'weight_loader'``) this is the fallback (``--trl-weight-push
    checkpoint-layout``): the names and tensors go through ``stable_rl.rollout.CheckpointLayout``, the reversal
    ``save_pretrained`` applies. TRL loads one tensor per call, so its push then makes one call per expert
    matrix instead of one per layer: slower than its own. Dense models pass unchanged."""
    from stable_rl.rollout.checkpoint_layout import CheckpointLayout

    layout, named_params = CheckpointLayout(model_path), generation._iter_named_params
    generation._iter_named_params = lambda: layout(named_params())


def own_push_or_checkpoint_layout(generation, model_path: str, about: dict) -> None:
    """TRL's own colocated weight push; where a sync fails (vLLM's loader refusing transformers 5's fused
    experts), that sync is finished, and every later one made, in the checkpoint's layout
    (``push_checkpoint_layout``). ``about["weight_push"]`` becomes "trl" or "checkpoint-layout (TRL's own
    push failed: <error>)".

    The fallback repeats only the colocated branch of TRL's (1.16) ``sync_weights`` that follows its wake-up:
    one ``load_weights`` call per tensor, then the prefix cache reset; the engine's weights are awake by then,
    and every tensor is pushed again."""
    own_sync = generation.sync_weights
    about["weight_push"] = "trl"

    def sync_weights() -> None:
        if about["weight_push"] != "trl":
            return own_sync()
        try:
            return own_sync()
        except Exception as error:  # whatever vLLM raises: the fallback pushes everything again, or fails itself
            about["weight_push"] = f"checkpoint-layout (TRL's own push failed: {type(error).__name__}: {error})"[:300]
        push_checkpoint_layout(generation, model_path)
        model = generation.llm.llm_engine.model_executor.driver_worker.model_runner.model
        for name, param in generation._iter_named_params():
            model.load_weights([(name, param)])
        generation.llm.reset_prefix_cache()

    generation.sync_weights = sync_weights


def run_trl(
    workload: dict,
    steps: int,
    loss: dict,
    options: dict,
    step_done: StepDone | None = None,
    weight_push: str = "auto",
    about: dict | None = None,
) -> dict:
    """TRL's GRPOTrainer for ``steps`` optimizer steps on the workload (``trl_settings``), the policy loaded in
    the workload's dtype; generation is timed in vLLM's ``LLM.generate`` with ``use_vllm``, else in the
    model's ``generate`` (and ``generate_batch``, transformers' continuous batching). ``weight_push``: "auto"
    (TRL's own push to vLLM, the checkpoint's layout where it fails: ``own_push_or_checkpoint_layout``),
    "trl" (TRL's own alone) or "checkpoint-layout" (``push_checkpoint_layout``); ``about["weight_push"]``
    says which ran."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from stable_rl.data import MathVerifier

    tokenizer = AutoTokenizer.from_pretrained(workload["model_path"])
    model = AutoModelForCausalLM.from_pretrained(
        workload["model_path"],
        dtype=getattr(torch, workload["dtype"]),
        experts_implementation=workload["experts_implementation"],
    )
    verifier = MathVerifier()

    def math_verify(completions: list[str], answer: list[str], **kwargs) -> list[float]:
        return verifier(completions, answer).tolist()

    class Clock(TrainerCallback):
        """Per step: its wall time (between step ends), the seconds of its timed parts, the update forwards'
        shapes, and its log, made into the step's record when TRL logs it."""

        def __init__(self) -> None:
            self.end: float | None = None
            self.record: dict = {}
            self.steps: list[dict] = []
            self.reset()

        def reset(self) -> None:
            self.times: dict[str, float] = {}  # "generation", "scoring", "old_forward"
            self.lengths: list = []  # completion lengths of the update's rows (tensors: no sync until the end)
            self.real: list = []
            self.padded, self.forwards = 0, 0

        def on_step_end(self, args, state, control, **kwargs) -> None:
            now, times = time.perf_counter(), self.times
            lengths = torch.cat(self.lengths).tolist()
            self.record = {
                "seconds": None if self.end is None else now - self.end,
                "rollout": times.get("generation", 0.0),
                "rollout_phase": times.get("scoring", 0.0) - times.get("old_forward", 0.0),
                "rows": len(lengths),
                "response_mean": sum(lengths) / len(lengths),
                "response_max": max(lengths),
                "real_tokens": int(sum(self.real)),
                "padded_tokens": self.padded,
                "forwards": self.forwards,
            }
            self.end = now
            self.reset()

        def on_log(self, args, state, control, logs=None, optimizer=None, **kwargs) -> None:
            if logs and "loss" in logs:
                step = self.record | {key: logs.get(key) for key in ("reward", "loss", "grad_norm")}
                self.steps.append(step)
                if step_done is not None:
                    step_done(step, optimizer_of(optimizer))

    clock = Clock()

    def timed_as(phase: str, method):
        def wrapper(*args, **kwargs):
            with timed(clock.times, phase):
                return method(*args, **kwargs)

        return wrapper

    # Without vLLM, TRL generates with the model itself (one process: nothing wraps it): generate, or
    # generate_batch with continuous batching
    if not options.get("use_vllm"):
        model.generate = timed_as("generation", model.generate)
    if options.get("use_transformers_continuous_batching"):
        model.generate_batch = timed_as("generation", model.generate_batch)
    with tempfile.TemporaryDirectory() as out:
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=math_verify,
            args=GRPOConfig(**trl_settings(workload, steps, out, loss, options)),
            train_dataset=trl_dataset(workload, steps, tokenizer),
            processing_class=tokenizer,
            callbacks=[clock],
        )
        if options.get("use_vllm"):
            llm = trainer.vllm_generation.llm
            llm.generate = timed_as("generation", llm.generate)
            pushed = about if about is not None else {}
            pushed["weight_push"] = weight_push
            if weight_push == "checkpoint-layout":
                push_checkpoint_layout(trainer.vllm_generation, workload["model_path"])
            elif weight_push == "auto":
                own_push_or_checkpoint_layout(trainer.vllm_generation, workload["model_path"], pushed)
        trainer._generate_and_score_completions = timed_as("scoring", trainer._generate_and_score_completions)
        logprobs = trainer._get_per_token_logps_and_entropies

        def counted(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
            """Every policy forward: [rows, prompt + completion width]; the update's each row once, and the
            no-grad one of TRL's importance sampling (vLLM rollouts) over the whole batch, timed."""
            clock.padded += input_ids.numel()
            clock.forwards += 1
            if torch.is_grad_enabled():
                clock.real.append(attention_mask.sum())
                clock.lengths.append(attention_mask[:, -logits_to_keep:].sum(-1))  # the completion mask
                return logprobs(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)
            with timed(clock.times, "old_forward"):
                return logprobs(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)

        trainer._get_per_token_logps_and_entropies = counted
        trainer.train()
        optimizer = optimizer_of(trainer.optimizer)
    verifier.close()
    if len(clock.steps) != steps:
        raise RuntimeError(f"TRL logged {len(clock.steps)} of {steps} steps")
    if not all(s["rollout"] for s in clock.steps):
        raise RuntimeError(f"generation was not timed in every step: {[s['rollout'] for s in clock.steps]}")
    return {"steps": clock.steps, "optimizer": optimizer, "threads": torch.get_num_threads()}
