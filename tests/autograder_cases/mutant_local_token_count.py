"""Mutant: token normalization by the micro-batch's own token count."""
from _impl import build

globals().update(build("local_token_count"))
