"""transformers internals stable-rl relies on (checked: transformers 5.19)."""

from torch import nn


def no_split_module_classes(model: nn.Module) -> set[str]:
    """Class names of the blocks a model must not be split inside, its decoder layers
    (``PreTrainedModel._no_split_modules``, which ``device_map="auto"`` uses); empty if it names none."""
    return set(getattr(model, "_no_split_modules", None) or ())
