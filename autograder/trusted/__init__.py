"""The trusted side: runs in the grader's own process and never runs student code.

It reads the submission as text (`submission`), starts the sandbox (`isolation`, `sandbox`), sends
each stage's child the `course` sources with that stage's references stubbed (`reference`), judges
the plain answers against stored and fresh expected values (`grader`, `core`, `checks`), and
writes the verdict (`results`, `report`). `sentinel` looks for tampering in a practice grade.
"""
