"""Mutant: population std (divides by G) in group normalization."""
from _impl import build

globals().update(build("biased_std"))
