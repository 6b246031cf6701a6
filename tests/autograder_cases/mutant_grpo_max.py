"""Mutant: max instead of min in the PPO-clip objective."""
from _impl import build

globals().update(build("grpo_max"))
