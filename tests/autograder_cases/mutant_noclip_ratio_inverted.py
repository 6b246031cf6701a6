"""Mutant: noclip's ratio taken as exp(log π_old − log π), upside down."""
from _impl import build

globals().update(build("noclip_ratio_inverted"))
