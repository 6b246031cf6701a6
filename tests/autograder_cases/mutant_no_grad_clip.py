"""Mutant: train step: max_grad_norm ignored."""
from _impl import build

globals().update(build("no_grad_clip"))
