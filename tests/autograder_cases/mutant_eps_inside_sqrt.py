"""Mutant: eps added inside the square root."""
from _impl import build

globals().update(build("eps_inside_sqrt"))
