"""Mutant: train step: loss divided by the accumulation steps twice (ms-swift #10117)."""
from _impl import build

globals().update(build("double_accumulation_division"))
