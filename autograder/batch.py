"""`python -m autograder.batch` moved to `python -m instructor.batch`: this alias forwards to it for one release."""

import sys

from course.cli import forward

if __name__ == "__main__":
    sys.exit(forward("instructor.batch", sys.argv[1:], old="autograder.batch"))
