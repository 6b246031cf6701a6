"""Mutant: aggregation: the padding multiplied by the mask (0 * nan = nan leaks)."""
from _impl import build

globals().update(build("padding_leaks_nan"))
