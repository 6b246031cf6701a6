"""`python -m course.mistakes` moved to `python -m instructor.mistakes`: this alias forwards to it for one release."""

import sys

from course.cli import forward

if __name__ == "__main__":
    sys.exit(forward("instructor.mistakes", sys.argv[1:], old="course.mistakes"))
