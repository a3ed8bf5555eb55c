"""``stable-rl``: LightningCLI over the PolicyModule and RolloutDataModule.

stable-rl fit --config recipes/quickstart.yaml
stable-rl fit --config recipes/minirl.yaml --config recipes/my_overrides.yaml
"""

import os

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # vLLM in the training process

from lightning.pytorch.cli import LightningCLI

from stable_rl.data import RolloutDataModule
from stable_rl.module import PolicyModule


def main(args: list[str] | None = None) -> LightningCLI:
    """Run the CLI; ``args`` replaces ``sys.argv[1:]`` (used by tests)."""
    return LightningCLI(
        PolicyModule,
        RolloutDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        save_config_kwargs={"overwrite": True},
        args=args,
    )


if __name__ == "__main__":
    main()
