"""Mutant: train step: loss divided by the accumulation steps twice."""
from _impl import build

globals().update(build("double_accumulation_division"))
