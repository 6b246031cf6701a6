"""Mutant: prompt tokens left in the response mask."""
from _impl import build

globals().update(build("prompt_in_mask"))
