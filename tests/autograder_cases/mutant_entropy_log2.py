"""Mutant: entropy in bits (log base 2)."""
from _impl import build

globals().update(build("entropy_log2"))
