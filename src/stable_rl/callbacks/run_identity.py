"""Which run a checkpoint belongs to: the settings it was trained with, kept in every checkpoint."""

import lightning as L


class RunIdentity(L.Callback):
    """Keeps ``settings`` (a run's config, one dotted name per setting: ``stable_rl.cli.resume.run_settings``) in
    every checkpoint, so that ``--ckpt_path=last`` resumes only the run's own checkpoint. ``stable-rl`` adds it to
    every run; loading a checkpoint leaves this run's settings as they are."""

    def __init__(self, settings: dict) -> None:
        self.settings = settings

    def state_dict(self) -> dict:
        return {"settings": self.settings}

    def load_state_dict(self, state_dict: dict) -> None:
        """The checkpoint's settings were compared before the run was built (``stable_rl.cli.resume``)."""
