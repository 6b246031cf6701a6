"""Mutant: noclip's ratio lets the gradient flow into log π_old (no stop-gradient)."""
from _impl import build

globals().update(build("noclip_old_attached"))
