"""Mutant: DAPO clip_lower and clip_higher swapped."""
from _impl import build

globals().update(build("swapped_clip"))
