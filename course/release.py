"""`python -m course.release` moved to `python -m instructor.release`: this alias forwards to it for one release."""

import sys

from course.cli import forward

if __name__ == "__main__":
    sys.exit(forward("instructor.release", sys.argv[1:], old="course.release"))
