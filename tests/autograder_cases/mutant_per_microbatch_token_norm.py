"""Mutant: train step: each micro-batch divided by its own token count (open-instruct's bug)."""
from _impl import build

globals().update(build("per_microbatch_token_norm"))
