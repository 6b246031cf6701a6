"""Mutant: labels equal to input_ids (the label shift forgotten)."""
from _impl import build

globals().update(build("no_shift"))
