"""Mutant: log-softmax materialized in bfloat16."""
from _impl import build

globals().update(build("half_log_softmax"))
