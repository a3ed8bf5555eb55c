"""``python -m stable_rl.cli``: the ``stable-rl`` console script."""

from stable_rl.cli import console

console()
