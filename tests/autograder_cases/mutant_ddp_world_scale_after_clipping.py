"""Mutant: train step: the world size dropped from the loss and put back on the gradients after
clipping, so clipping bounds a norm without the dp_size factor (Arctic-Platform #119)."""
from _impl import build

globals().update(build("ddp_world_scale_after_clipping"))
