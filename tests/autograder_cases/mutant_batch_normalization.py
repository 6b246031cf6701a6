"""Mutant: advantages normalized over the whole batch, not per group."""
from _impl import build

globals().update(build("batch_normalization"))
