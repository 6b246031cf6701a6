"""Mutant: clip fraction counted on the wrong side."""
from _impl import build

globals().update(build("clip_wrong_side"))
