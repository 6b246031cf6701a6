"""Mutant: the format reward returned as the reward."""
from _impl import build

globals().update(build("format_as_reward"))
