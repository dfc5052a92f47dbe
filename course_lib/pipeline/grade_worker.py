"""One grading worker: autograde the students named on stdin, one JSON line each on stdout.

    python -m course_lib.pipeline.grade_worker '{"sandbox": true, ...}' 00_orientation
    stdin:  alice\nbob\n     stdout: COURSE-RESULT {"student": "alice", "ok": true, "reason": ""}

``course grade`` runs ``--jobs`` of these and hands each the next student when it answers,
so nbgrader's start-up (about two seconds) is paid once per worker, not once per student.
Each student goes through nbgrader's own autograde (``NbGraderAPI.autograde``), whose
Execute step is ``GradeOutOfProcess`` (autograde.py), configured by the JSON options.
"""
from __future__ import annotations

import json
import os
import sys

from course_lib.pipeline.autograde import GradingFailed

RESULT = "COURSE-RESULT"  # prefix of each answer line; anything else on stdout is noise


def explain_failure(text: str) -> str:
    """A one-line reason from nbgrader's log and traceback of a failed autograde."""
    for line in reversed(text.splitlines()):
        if GradingFailed.MARKER in line:
            return line.split(GradingFailed.MARKER, 1)[1].strip()
    errors = [line for line in text.splitlines() if "Error" in line or "ERROR" in line]
    return (errors[-1] if errors else (text.strip().splitlines() or ["nbgrader failed"])[-1]).strip()[:300]


def make_api(grading_dir: str, options: dict):
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config, PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=grading_dir).load_config()
    overrides = Config()
    for key, value in options.items():
        setattr(overrides.GradeOutOfProcess, key, value)
    config.merge(overrides)
    return NbGraderAPI(CourseDirectory(config=config), config=config)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    options, assignment = json.loads(argv[0]), argv[1]
    api = make_api(os.getcwd(), options)
    for line in sys.stdin:
        student = line.strip()
        if not student:
            continue
        result = api.autograde(assignment, student, force=True, create=True)
        reason = "" if result["success"] else explain_failure(result.get("log", "") + "\n" + result.get("error", ""))
        print(RESULT, json.dumps({"student": student, "ok": bool(result["success"]), "reason": reason}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
