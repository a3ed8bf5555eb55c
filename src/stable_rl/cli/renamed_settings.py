"""Settings and classes that were renamed, named with their new name when a config file or the command line
still uses the old one (jsonargparse would only say that the key is unknown or the class not found)."""

from pathlib import Path

import yaml

RUNTIME = (  # the policy's runtime switches, grouped under model.init_args.runtime (``ModelRuntime``)
    "experts_implementation",
    "attn_implementation",
    "kernels",
    "compile_layers",
    "compile_logprobs",
    "padding_mask",
    "packed_sequences",
    "logprob_chunk_size",
    "keep_head_grad",
    "gradient_checkpointing",
)
RENAMED = {  # old dotted key -> new one
    "data.init_args.benchmarks": "data.init_args.eval_sets",  # "benchmarks" are the performance scripts
    **{f"model.init_args.{name}": f"model.init_args.runtime.{name}" for name in RUNTIME},
    # the batch geometry's one owner is the data module (stable_rl.batch_plan)
    "model.init_args.mini_batch_size": "data.init_args.mini_batch_size",
    "model.init_args.micro_batch_size": "data.init_args.micro_batch_size",
}
MOVED = {  # old class path -> new one: RL beside SFT
    "stable_rl.module.PolicyModule": "stable_rl.rl.PolicyModule",
    "stable_rl.data.RolloutDataModule": "stable_rl.rl.RolloutDataModule",
}


def _dotted_keys(tree, prefix: str = ""):
    """(dotted key, value) of every entry of a parsed YAML tree, lists' items included."""
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
    for key, value in items:
        dotted = f"{prefix}{key}"
        yield dotted, value
        yield from _dotted_keys(value, f"{dotted}.")


def renamed_setting(args: list[str], configs: list[Path]) -> str | None:
    """The first renamed setting in ``configs`` or ``args`` and its new name, or None."""
    for path in configs:
        tree = yaml.safe_load(path.read_text())
        for key, value in _dotted_keys(tree):
            if key in RENAMED:
                return f"{path}: {key} is now {RENAMED[key]}: rename it there"
            if isinstance(value, str) and value in MOVED:
                return f"{path}: {key}: {value} is now {MOVED[value]}: rename it there"
    for arg in args:
        key, _, value = arg.removeprefix("--").partition("=")
        if key in RENAMED:
            return f"--{key} is now --{RENAMED[key]}"
        if value in MOVED:
            return f"--{key}: {value} is now {MOVED[value]}"
    return None
