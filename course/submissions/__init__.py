"""A learner's own code: the notebook reader that keeps only definitions and never runs them
(`reader`, with its parser `parsing`; the autograder's trusted side reads submissions with it),
and the learner's stages loaded from their notebooks to run in their own process
(`implementations`: notebook 08, `python -m course.train --notebooks DIR`).

It imports only the top of `course` (the registry), never the loop or the lab.
"""
