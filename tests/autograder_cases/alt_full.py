"""Correct submission #1: the independent implementation in _impl.py with no bug switched on."""
from _impl import build

globals().update(build())
