"""Mutant: truncated importance weight inverted."""
from _impl import build

globals().update(build("tis_inverted"))
