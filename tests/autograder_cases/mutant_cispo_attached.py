"""Mutant: CISPO weight not detached."""
from _impl import build

globals().update(build("cispo_attached"))
