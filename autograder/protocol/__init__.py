"""What crosses the boundary between the grader and the worker, one definition each.

`wire`: the framing of every message and the answer format the grader decodes as hostile input.
`answers`: the status of each graded function and the one shape of an error answer.
`markers`: requests name a model, tokenizer or reward function by a small marker; both sides
build the same object from it.
`saved_bytes`: what autograd saves for backward, counted the same way on both sides.
`precision`: float32 matmuls in IEEE float32, not TF32, on both sides (the tolerances assume it).
`cleanup`: deleting and measuring a folder a submission wrote, by an iterative walk (the template
after each child, the grader when a sandbox closes, the disk watchdog).
"""
