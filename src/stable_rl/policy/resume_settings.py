"""Settings changed on resume: Lightning restores the optimizer's state with the hyperparameters it was
saved with, so a resumed run silently trains at the checkpoint's learning rate, whatever the config says.
Here the configured ones are written into the checkpoint before Lightning loads it: they apply from the
first resumed update, and each change is named. A different optimizer class is refused (its state would be
loaded into the wrong optimizer)."""

import torch
from torch import nn
from torch.optim import Optimizer


def configured_optimizer(factory) -> Optimizer:
    """What the config's optimizer factory builds, on a stand-in parameter: its class and defaults."""
    return factory([nn.Parameter(torch.zeros(1))])


def check_optimizer_class(checkpoint: dict, configured: Optimizer) -> None:
    """Refuse a checkpoint of another optimizer class (its state would be loaded into the wrong optimizer)."""
    saved = checkpoint.get("optimizer_class")
    mine = type(configured).__qualname__
    if saved is not None and saved != mine:
        raise ValueError(
            f"the checkpoint was trained with {saved}, this run's model.optimizer is {mine}: its state cannot "
            f"carry over. Resume with {saved}, or start a new run from the checkpoint's weights"
        )


def apply_configured_optimizer(checkpoint: dict, configured: Optimizer) -> list[str]:
    """Rewrite ``checkpoint``'s optimizer and scheduler states to the ``configured`` hyperparameters;
    returns the changes ("lr 0.0005 -> 0.0001"). The learning rate is the schedule's base (``initial_lr``):
    a scheduled rate is rescaled by new/old base, so the schedule goes on from the new base."""
    check_optimizer_class(checkpoint, configured)
    new_lr, changes, scale = configured.defaults["lr"], set(), 1.0
    for state in checkpoint.get("optimizer_states", []):
        for group in state["param_groups"]:
            for key, value in configured.defaults.items():
                if key != "lr" and key in group and group[key] != value:
                    changes.add(f"{key} {group[key]} -> {value}")
                    group[key] = value
            base = group.get("initial_lr", group["lr"])
            if base != new_lr:
                changes.add(f"lr {base:g} -> {new_lr:g}")
                scale = new_lr / base
                group["lr"] *= scale
                if "initial_lr" in group:
                    group["initial_lr"] = new_lr
    for scheduler in checkpoint.get("lr_schedulers", []):
        if "base_lrs" in scheduler:
            scheduler["base_lrs"] = [new_lr for _ in scheduler["base_lrs"]]
        if "_last_lr" in scheduler:
            scheduler["_last_lr"] = [lr * scale for lr in scheduler["_last_lr"]]
    return sorted(changes)


def apply_to_live_optimizer(optimizer: Optimizer, schedulers: list, configured: Optimizer) -> list[str]:
    """``apply_configured_optimizer`` on an optimizer and schedulers that hold their restored states already, as
    every strategy leaves them once training starts (FSDP2's loads a sharded checkpoint's states straight into
    them, not through the checkpoint dict). Their param groups and scheduler attributes are rewritten in place."""
    live = {
        "optimizer_states": [{"param_groups": optimizer.param_groups}],
        "lr_schedulers": [vars(s) for s in schedulers],
    }
    return apply_configured_optimizer(live, configured)


def describe(objective) -> dict:
    """An objective's class and scalar settings, kept in checkpoints to name a change on resume."""
    settings = {k: v for k, v in sorted(vars(objective).items()) if isinstance(v, int | float | bool | str)}
    return {"class": type(objective).__qualname__, "settings": settings}
