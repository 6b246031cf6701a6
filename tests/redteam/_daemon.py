"""Shared by the escape attacks: write a perfect results.json wherever a grader might look."""
import json
import os

PERFECT = json.dumps({"score": 1000, "tests": [{"name": "x", "score": 1000, "max_score": 1000}]})


def write_everywhere(extra=()):
    for path in ("results.json", "/tmp/results.json", "/autograder/results/results.json",
                 os.path.expanduser("~/results.json"), *extra):
        try:
            with open(path, "w") as handle:
                handle.write(PERFECT)
        except OSError:
            pass
