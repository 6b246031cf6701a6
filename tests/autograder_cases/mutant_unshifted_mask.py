"""Mutant: the mask not shifted along with the labels."""
from _impl import build

globals().update(build("unshifted_mask"))
