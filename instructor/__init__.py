"""The instructor's tools: what releases, deploys and grades a class, never shipped to students.

    release.py, edition.py, manifest.py   the student notebooks and the student edition
    mistakes.py, one_implementation.py    notebooks kept in step with the checks and `course`
    html_export.py                        offline HTML of the notebooks
    fixtures.py                           the autograder's stored cases, regenerated
    gradescope.py, rehearsal.py           the Gradescope bundle, built and rehearsed in Docker
    batch.py, classmates.py               grading a class, and the copies among it

It imports `autograder` and `course`; neither imports it (tests/test_layout.py). Its extra
dependencies (nbgrader, latex2mathml) are the `instructor` extra: `pip install -e ".[instructor]"`.
"""
