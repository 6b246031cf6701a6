"""Mutant: TIS weights multiplied into the KL term."""
from _impl import build

globals().update(build("tis_on_kl"))
