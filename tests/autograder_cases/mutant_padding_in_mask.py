"""Mutant: padding counted as response in the mask."""
from _impl import build

globals().update(build("padding_in_mask"))
