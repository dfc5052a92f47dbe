"""The notebook pipeline: author -> source notebook -> release -> check -> grade -> feedback.

Each step is one module:
    authoring.py   grading/authoring/NN_topic.py (readable text) -> nbgrader source notebook
    notebook_io.py read notebooks with one clear error for every way they can be broken
    release.py     nbgrader generate_assignment -> notebooks/ (the learner copies)
    check.py       run a notebook in a fresh kernel and report each exercise's visible tests
    grade.py       nbgrader autograde + feedback + CSV, with failed submissions named as such
    feedback.py    the nbconvert preprocessor that keeps hidden tests out of feedback
"""
