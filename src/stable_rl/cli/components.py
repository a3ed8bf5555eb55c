"""Every ``class_path`` of a parsed config checked to name a class of the component's kind, before anything is
built. jsonargparse checks a class against its setting's type, but takes a function as the ``class_path`` of a
callable setting (the optimizer, the learning-rate schedule) and calls it with its ``init_args`` when it builds
the objects: ``class_path: subprocess.getoutput`` with ``cmd: ...`` ran a shell command.

This narrows what a config can name by mistake; it is no sandbox: a config names code to import and run, and
is to be trusted like a script (docs/recipes.md)."""

import pydoc

from jsonargparse import Namespace
from lightning.pytorch.callbacks import Callback
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

from stable_rl.objectives import Objective

KINDS = {  # a setting's last key -> the classes its class_path must derive from, their name, an example
    "optimizer": ((Optimizer,), "torch.optim.Optimizer", "torch.optim.AdamW"),
    "lr_scheduler": (
        (LRScheduler, ReduceLROnPlateau),
        "torch.optim.lr_scheduler.LRScheduler",
        "torch.optim.lr_scheduler.LinearLR",
    ),
    "objective": ((Objective,), "stable_rl.objectives.Objective", "stable_rl.objectives.MiniRL"),
    "callbacks": ((Callback,), "lightning.pytorch.callbacks.Callback", "lightning.pytorch.callbacks.ModelCheckpoint"),
}


def check_components(config: Namespace) -> None:
    """Refuse a ``class_path`` that is no class, or, for a setting of ``KINDS``, no subclass of its bases."""
    for key, class_path in _class_paths(config, ""):
        found = pydoc.locate(class_path)
        if found is None:  # an import path that fails: jsonargparse has named it
            continue
        bases, base_name, example = KINDS.get(key.rsplit(".", 1)[-1].split("[", 1)[0], ((object,), "", ""))
        if isinstance(found, type) and issubclass(found, bases):
            continue
        what = f"a subclass of {base_name} (e.g. {example})" if base_name else "a class"
        raise ValueError(
            f"{key}.class_path: {class_path} is not {what}: a class_path names the class of the component to "
            "build, never a function to call"
        )


def _class_paths(tree, prefix: str):
    """(dotted key, class path) of every component in a parsed config, lists' items as ``key[i]``."""
    if isinstance(tree, list):
        for i, item in enumerate(tree):
            yield from _class_paths(item, f"{prefix}[{i}]")
    elif isinstance(tree, Namespace | dict):
        for name, value in (tree if isinstance(tree, dict) else vars(tree)).items():
            if name == "class_path" and isinstance(value, str):
                yield prefix, value
            else:
                yield from _class_paths(value, f"{prefix}.{name}" if prefix else name)
