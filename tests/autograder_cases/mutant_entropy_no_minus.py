"""Mutant: entropy without the minus sign."""
from _impl import build

globals().update(build("entropy_no_minus"))
