"""`python -m course.one_implementation` moved to `python -m instructor.one_implementation`: this alias forwards to it for one release."""

import sys

from course.cli import forward

if __name__ == "__main__":
    sys.exit(forward("instructor.one_implementation", sys.argv[1:], old="course.one_implementation"))
