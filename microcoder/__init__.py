"""microcoder: reinforcement learning for code-generation models (MicroCoder-GRPO)."""

__version__ = "0.1.0"
