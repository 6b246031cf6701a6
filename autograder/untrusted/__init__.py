"""The untrusted side: code of the grader's that runs next to the student's, inside the sandbox.

`worker` is the sandboxed program (a template that forks one child per stage); `probes` call the
submission's functions there and turn what they return into plain data; `provenance` tells code
the grader read from code made at run time, and keeps the grader's objects out of the
submission's reach; `seal` copies the code that measures and answers onto globals the
submission cannot reach, before it loads. Nothing they say is believed: the trusted side decodes
it with `autograder.protocol.wire` and judges it itself.
"""
