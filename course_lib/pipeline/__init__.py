"""The notebook pipeline: author -> source notebook -> release -> check -> grade -> feedback.

Each step is one module:
    authoring.py      grading/authoring/NN_topic.py (readable text) -> nbgrader source notebook
    notebook_io.py    read notebooks with one clear error for every way they can be broken
    release.py        nbgrader generate_assignment -> notebooks/ (the learner copies)
    check.py          run a notebook in a fresh kernel and report each exercise's visible tests
    grade.py          course grade: workers, FAILED reasons, feedback, CSV
    grade_worker.py   one worker process: nbgrader autograde for each student it is handed
    autograde.py      nbgrader's Execute step replaced: sandboxed answers, hidden verdicts here
    hidden.py         hidden tests (grading/hidden/NN_topic.py) and their checks
    learner.py        the student's answers in a kernel, called with plain data
    plain_data.py     what may cross between grader and student kernel
    remote_call.py    the kernel side of one call
    sandbox.py        the bubblewrap sandbox around a student kernel
    limits.py         rlimits and cgroups applied before the sandbox starts
    cgroups.py        per-sandbox process and CPU limits
    reference_stubs.py  the course_lib reference answers, stubbed out inside the sandbox
"""
