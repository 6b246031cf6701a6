"""Mutant: train step: loss not multiplied by the world size under DDP (dp_size dropped, Arctic-Platform #119)."""
from _impl import build

globals().update(build("ddp_no_world_scale"))
