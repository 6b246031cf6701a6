"""Mutant: padding with eos although the tokenizer has a pad token."""
from _impl import build

globals().update(build("pad_with_eos"))
