"""stable-rl: stable reinforcement learning of LLMs with Lightning (arXiv 2512.01374)."""

__version__ = "0.1.0"
