"""Mutant: train step: the sequence-mean loss divided by the world size under DDP, not multiplied (verl #5798)."""
from _impl import build

globals().update(build("ddp_seq_mean_divided_by_world"))
