"""``stable-rl fit --help`` lists stable-rl's own settings, not only Lightning's.

LightningCLI in subclass mode shows ``--model`` and ``--data`` as one line each (their options appear only under
``--model.help CLASS``); this adds, after Lightning's help, the options of the components the recipes use: the
policy module, its default objective and optimizer (the learning rate), the rollout data module and its vLLM
engine, each under the flag a command line or YAML sets it with.
"""

from jsonargparse import ArgumentParser
from lightning.pytorch.cli import LightningArgumentParser

SHARED = {"model_path"}  # set under model, linked to data (stable_rl/cli/app.py)
# (title, import path, where its settings go, settings not listed); the recipes' choices (recipes/minirl.yaml)
COMPONENTS: tuple[tuple[str, str, str, set[str]], ...] = (
    ("the policy (model.class_path: stable_rl.rl.PolicyModule)", "stable_rl.rl.PolicyModule", "model.init_args", set()),
    (
        "its objective (default MiniRL, paper Eq. 7)",
        "stable_rl.objectives.MiniRL",
        "model.init_args.objective.init_args",
        set(),
    ),
    (
        "its optimizer (AdamW in the recipes: lr is the learning rate)",
        "torch.optim.AdamW",
        "model.init_args.optimizer.init_args",
        {"params"},
    ),
    (
        "the rollouts (data.class_path: stable_rl.rl.RolloutDataModule)",
        "stable_rl.rl.RolloutDataModule",
        "data.init_args",
        SHARED,
    ),
    (
        "their engine (stable_rl.rollout.VLLMEngine)",
        "stable_rl.rollout.VLLMEngine",
        "data.init_args.engine.init_args",
        set(),
    ),
)
OTHERS = (
    "Other components: --model.init_args.objective.help CLASS (e.g. GRPO, CISPO), --data.init_args.engine.help "
    "HFEngine, --data.init_args.prompts.help FilePrompts; every recipe's settings: stable-rl fit --config "
    "recipes/minirl.yaml --print_config"
)


def components_help() -> str:
    """The settings of ``COMPONENTS``, formatted as jsonargparse formats a class's help."""
    from importlib import import_module

    sections = []
    for title, path, prefix, skip in COMPONENTS:
        module, name = path.rsplit(".", 1)
        parser = ArgumentParser(usage="", add_help=False)
        parser.add_class_arguments(getattr(import_module(module), name), prefix, skip=skip, sub_configs=True)
        group = parser.format_help().split("\n\n", 1)[-1].split("\n", 1)[-1]  # past usage and the class's own title
        sections.append(f"stable-rl: {title}:\n{group.rstrip()}")
    return "\n\n".join([*sections, OTHERS]) + "\n"


class StableRLArgumentParser(LightningArgumentParser):
    """Lightning's parser; the parser of a subcommand that trains (``with_components``) adds ``components_help``."""

    with_components = False

    def format_help(self) -> str:
        text = super().format_help()
        return f"{text}\n{components_help()}" if self.with_components else text
