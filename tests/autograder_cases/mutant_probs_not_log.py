"""Mutant: probabilities returned instead of log-probabilities."""
from _impl import build

globals().update(build("probs_not_log"))
