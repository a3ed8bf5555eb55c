"""The progress bar of an RL run: global steps, reward, KL and entropy."""

from lightning.pytorch.callbacks import RichProgressBar


class StepProgressBar(RichProgressBar):
    """Lightning's rich progress bar, titled "Training" (an RL run has no epochs: ``max_steps`` ends it, and
    Lightning's "Epoch 0/-2" says nothing), without the logger's version number. ``stable-rl`` puts it in place
    of Lightning's default bar; the module logs reward, KL and entropy to it (``prog_bar=True``)."""

    def _get_train_description(self, current_epoch: int) -> str:  # RichProgressBar's, checked in test_console
        return f"{'Training':{len(self.validation_description)}}"

    def get_metrics(self, trainer, pl_module) -> dict:
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        return items


def replace_default_bar(callbacks: list) -> None:
    """Put a ``StepProgressBar`` in place of Lightning's default rich bar; a bar the user configured stays."""
    for i, callback in enumerate(callbacks):
        if type(callback) is RichProgressBar:
            callbacks[i] = StepProgressBar()
