"""The runs of ``benchmarks/trl_comparison.py``, one per child process: stable-rl's ``fit`` and TRL's
``GRPOTrainer`` on one workload, each returning one record per global step (see ``STEP_KEYS``)."""

import os
import tempfile
import time

# Per global step, on both sides: wall seconds (None for the first step), seconds generating, the mean
# and the longest response (tokens), the real tokens (prompt + response, no padding) of the step's
# sequences, the tokens the update's forwards compute (rows x padded width, summed over forwards),
# the number of those forwards, and the training signals.
STEP_KEYS = (
    "seconds",
    "rollout",
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


def run_stable_rl(workload: dict, steps: int, config: list[str], engine: str | None) -> dict:
    """``stable-rl fit`` on the recipe with the workload's overrides for ``steps`` global steps,
    validation, checkpoints and logging off; ``engine``: another rollout engine class than the recipe's."""
    import lightning as L
    import torch
    from _fit import fit_with

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
            step["seconds"] = float(m["time/step"]) if "time/step" in m else None  # from the second step on
            self.steps.append(step)

    probe = Probe()
    args = [
        *(f"--config={c}" for c in config),
        f"--trainer.max_steps={steps}",
        "--trainer.limit_val_batches=0",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_checkpointing=false",
        "--trainer.callbacks=[]",
        "--trainer.logger=false",
        f"--model.init_args.model_path={workload['model_path']}",
        f"--model.init_args.micro_batch_size={workload['micro_batch_size']}",
        f"--data.init_args.prompts_per_step={workload['prompts']}",
    ]
    if engine:  # the recipe's engine arguments (max_new_tokens, temperature, dtype) carry over
        args.append(f"--data.init_args.engine.class_path={engine}")
    args.append(f"--data.init_args.engine.init_args.max_new_tokens={workload['max_tokens']}")
    fit_with(probe, args)
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


def trl_config(workload: dict, steps: int, out: str, continuous_batching: bool, loss: dict):
    """TRL's ``GRPOConfig`` for the workload: its best CPU settings (forwards of 64 rows, one generation
    per forward), torch.optim.AdamW as stable-rl's recipe builds it, the rest TRL's defaults except where
    they would change the workload (see the module docstring of ``trl_comparison``)."""
    from trl import GRPOConfig

    responses = workload["prompts"] * workload["group_size"]
    per_device = min(workload["micro_batch_size"], responses)
    if responses % per_device:
        raise ValueError(f"{responses} responses per step are not a multiple of {per_device} rows per forward")
    return GRPOConfig(
        output_dir=out,
        max_steps=steps,
        per_device_train_batch_size=per_device,  # rows per forward/backward, as stable-rl's micro_batch_size
        gradient_accumulation_steps=responses // per_device,  # one optimizer step per prompts x G responses
        steps_per_generation=1,  # generate per forward: HF generate pads each 64-row batch to its own longest
        num_generations=workload["group_size"],
        max_completion_length=workload["max_tokens"],
        temperature=workload["temperature"],
        top_p=1.0,
        top_k=0,  # as stable-rl's engines: the full distribution
        use_transformers_continuous_batching=continuous_batching,
        learning_rate=workload["lr"],
        lr_scheduler_type="constant",
        warmup_steps=0,
        optim="adamw_torch",  # torch.optim.AdamW, foreach/fused unset (torch's CPU default), as stable-rl's recipe
        weight_decay=workload["weight_decay"],
        max_grad_norm=workload["max_grad_norm"],
        shuffle_dataset=False,
        seed=workload["seed"],
        bf16=False,
        gradient_checkpointing=False,
        use_cpu=True,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        **loss,
    )


def run_trl(workload: dict, steps: int, continuous_batching: bool, loss: dict) -> dict:
    """TRL's GRPOTrainer for ``steps`` optimizer steps on the workload."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOTrainer

    from stable_rl.data import MathVerifier

    tokenizer = AutoTokenizer.from_pretrained(workload["model_path"])
    model = AutoModelForCausalLM.from_pretrained(workload["model_path"], dtype=torch.float32)
    verifier = MathVerifier()

    def math_verify(completions: list[str], answer: list[str], **kwargs) -> list[float]:
        return verifier(completions, answer).tolist()

    class Clock(TrainerCallback):
        """Step ends, and per step: seconds generating, the update forwards' shapes, and the logs."""

        def __init__(self) -> None:
            self.ends: list[float] = []
            self.logs: list[dict] = []
            self.steps: list[dict] = []
            self.reset()

        def reset(self) -> None:
            self.generating, self.lengths, self.real, self.padded, self.forwards = 0.0, [], 0, 0, 0

        def on_step_end(self, args, state, control, **kwargs) -> None:
            self.ends.append(time.perf_counter())
            self.steps.append(
                {
                    "rollout": self.generating,
                    "response_mean": sum(self.lengths) / len(self.lengths),
                    "response_max": max(self.lengths),
                    "real_tokens": self.real,
                    "padded_tokens": self.padded,
                    "forwards": self.forwards,
                }
            )
            self.reset()

        def on_log(self, args, state, control, logs=None, **kwargs) -> None:
            if logs and "loss" in logs:
                self.logs.append(dict(logs))

    clock = Clock()

    def timed(method):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                clock.generating += time.perf_counter() - start

        return wrapper

    # TRL generates with the model itself (one CPU process: nothing wraps it): generate, or generate_batch
    # with continuous batching
    model.generate = timed(model.generate)
    if continuous_batching:
        model.generate_batch = timed(model.generate_batch)
    with tempfile.TemporaryDirectory() as out:
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=math_verify,
            args=trl_config(workload, steps, out, continuous_batching, loss),
            train_dataset=trl_dataset(workload, steps, tokenizer),
            processing_class=tokenizer,
            callbacks=[clock],
        )
        logprobs = trainer._get_per_token_logps_and_entropies

        def counted(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
            """Every policy forward of the update: [rows, prompt + completion width]."""
            clock.padded += input_ids.numel()
            clock.real += int(attention_mask.sum())
            clock.forwards += 1
            clock.lengths += attention_mask[:, -logits_to_keep:].sum(-1).tolist()  # the completion mask
            return logprobs(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)

        trainer._get_per_token_logps_and_entropies = counted
        trainer.train()
        optimizer = optimizer_of(trainer.optimizer)
    verifier.close()
    if len(clock.logs) != steps or len(clock.steps) != steps:
        raise RuntimeError(f"TRL logged {len(clock.logs)} and ended {len(clock.steps)} of {steps} steps")
    if not all(s["rollout"] for s in clock.steps):
        raise RuntimeError(f"generation was not timed in every step: {[s['rollout'] for s in clock.steps]}")
    seconds = [None] + [b - a for a, b in zip(clock.ends, clock.ends[1:], strict=False)]
    steps_run = [
        {**step, "seconds": s, "reward": log["reward"], "loss": log["loss"], "grad_norm": log["grad_norm"]}
        for s, step, log in zip(seconds, clock.steps, clock.logs, strict=True)
    ]
    return {"steps": steps_run, "optimizer": optimizer, "threads": torch.get_num_threads()}
