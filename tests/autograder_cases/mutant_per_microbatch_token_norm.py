"""Mutant: train step: each micro-batch divided by its own token count (open-instruct's bug; verl's
legacy dp_actor, verl #7321)."""
from _impl import build

globals().update(build("per_microbatch_token_norm"))
