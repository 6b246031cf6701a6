"""Mutant: train step: gradients not zeroed after the step."""
from _impl import build

globals().update(build("grads_left"))
