"""Mutant: empty responses dropped from the sequence mean."""
from _impl import build

globals().update(build("empty_row_dropped"))
