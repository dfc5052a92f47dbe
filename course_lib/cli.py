"""The ``course`` command: open the course, check notebooks, release and grade them.

    course lab [--instructor]      start JupyterLab on notebooks/ (prints the URL); nbgrader's tools with --instructor
    course check NOTEBOOK [--full] run a notebook, one line per exercise; exit 0 if all pass
                                   (--full: the hidden tests too, run as the grader runs them)
    course release [NAME ...]      authoring file -> source notebook -> nbgrader release -> notebooks/
    course grade NAME              autograde grading/submitted/*/NAME in sandboxed kernels, feedback, CSV
    course export-grades NAME --format csv|canvas   the gradebook's scores, as a CSV or for Canvas's import
    course train / course eval     reproduce / measure the shipped course model

Exit status: 0 success, 1 something failed (a test, a submission), 2 bad input.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from course_lib import validation

# The pipeline (nbformat, nbgrader) is imported by the commands that use it, not here: the
# delegated commands (drill, serve, train, ...) start without paying for it.


def positive_int(text: str) -> int:
    """argparse type: a whole number above zero (validation.positive_int on the parsed text)."""
    try:
        return validation.positive_int("the value", int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number above 0, got {text!r}") from None


def cmd_lab(args) -> int:
    from course_lib.lab import run_lab
    from course_lib.pipeline.paths import find_course

    return run_lab(find_course(), args.ip, args.port, instructor=args.instructor)


def cmd_check(args) -> int:
    from course_lib.pipeline.check import check_notebook, format_report

    report = check_notebook(Path(args.notebook), cell_timeout=args.timeout, full=args.full)
    print(format_report(report))
    return 0 if report.ok else 1


def cmd_release(args) -> int:
    from course_lib.pipeline.paths import find_course
    from course_lib.pipeline.release import release

    for name, changed in release(find_course(), args.names or None):
        print(f"{name}: notebooks/{name}.ipynb {'updated' if changed else 'unchanged'}")
    return 0


def cmd_grade(args) -> int:
    from course_lib.pipeline.grade import GradeOptions, format_table, grade
    from course_lib.pipeline.paths import find_course
    from course_lib.pipeline.sandbox import Limits

    paths = find_course()
    options = GradeOptions(cell_timeout=args.cell_timeout, notebook_timeout=args.timeout, jobs=args.jobs,
                           sandbox=not args.no_sandbox, scoring=args.scoring,
                           limits=Limits(args.memory_mb, args.processes, args.cpu_seconds))
    grades = grade(paths, args.assignment, options)
    print(options.describe())
    print(format_table(grades))
    print(f"grades: {(paths.grades / (args.assignment + '.csv')).relative_to(paths.root)}; "
          f"feedback: {paths.feedback.relative_to(paths.root)}/<student>/{args.assignment}/")
    failed = [g.student for g in grades if g.status == "FAILED"]
    if failed:
        print(f"{len(failed)} submission(s) could not be graded: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def cmd_export_grades(args) -> int:
    from course_lib.pipeline.export import NothingToExport, export_grades
    from course_lib.pipeline.paths import find_course

    paths = find_course()
    try:
        path, scores = export_grades(paths, args.assignment, args.format,
                                     Path(args.output) if args.output else None, args.column)
    except NothingToExport as exc:
        print(f"course export-grades: {exc}", file=sys.stderr)
        return 2
    graded = sum(s.score is not None for s in scores.students)
    shown = path.relative_to(paths.root) if path.resolve().is_relative_to(paths.root.resolve()) else path
    print(f"{shown}: {len(scores.students)} students, {graded} with a graded submission")
    return 0


# Commands whose arguments belong to another module's own parser (its --help included).
DELEGATED = {"train": ("course_lib.train", "reproduce the shipped course model (seeded)"),
             "eval": ("course_lib.evaluate", "measure the shipped model's quality on the held-out split"),
             "serve": ("course_lib.api.server", "serve a course model over an OpenAI-compatible HTTP API"),
             "bench-serve": ("course_lib.api.loadgen",
                             "load-test any OpenAI-compatible server: TTFT, TPOT, ITL, throughput, goodput"),
             "export-hf": ("course_lib.model.export_hf",
                           "write a course model as a Hugging Face Llama directory (for transformers or vLLM)"),
             "trace": ("course_lib.context.trace_log",
                       "check a request-trace log: course trace verify FILE [--head COUNT:HASH], course trace head FILE"),
             "drill": ("course_lib.drills.cli", "interview drills: numeric problems and probe cards, scheduled by FSRS")}


def run_delegated(command: str, rest: list[str]) -> int:
    import importlib

    module = importlib.import_module(DELEGATED[command][0])
    return int(module.main(rest) or 0)


def build_parser() -> argparse.ArgumentParser:
    from course_lib.pipeline.check import CHECK_CELL_TIMEOUT
    from course_lib.pipeline.export import FORMATS
    from course_lib.pipeline.grade import GradeOptions
    from course_lib.pipeline.hidden import ALL_OR_NOTHING, PARTIAL, SCORING
    from course_lib.pipeline.sandbox import Limits

    parser = argparse.ArgumentParser(prog="course", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    lab = sub.add_parser("lab", help="start JupyterLab on the course notebooks")
    lab.add_argument("--ip", default="127.0.0.1")
    lab.add_argument("--port", type=int, default=8888)
    lab.add_argument("--instructor", action="store_true",
                     help="show nbgrader's tools (Nbgrader menu, Create Assignment, formgrader) for grading/")
    lab.set_defaults(run=cmd_lab)

    check = sub.add_parser("check", help="run a notebook and report each exercise's visible tests")
    check.add_argument("notebook")
    check.add_argument("--timeout", type=positive_int, default=CHECK_CELL_TIMEOUT,
                       help=f"seconds allowed per cell (default {CHECK_CELL_TIMEOUT})")
    check.add_argument("--full", action="store_true",
                       help="also run the hidden tests (needs grading/hidden/, the answer key: for learners working alone)")
    check.set_defaults(run=cmd_check)

    rel = sub.add_parser("release", help="rebuild and release notebooks into notebooks/")
    rel.add_argument("names", nargs="*", help="assignments (default: all)")
    rel.set_defaults(run=cmd_release)

    grd = sub.add_parser("grade", help="autograde grading/submitted/<student>/ASSIGNMENT")
    grd.add_argument("assignment")
    grd.add_argument("--cell-timeout", type=positive_int, default=GradeOptions.cell_timeout,
                     help=f"seconds per cell and per hidden-test call (default {GradeOptions.cell_timeout})")
    grd.add_argument("--timeout", type=float, default=GradeOptions.notebook_timeout,
                     help=f"seconds per submission in total (default {GradeOptions.notebook_timeout:g})")
    grd.add_argument("--jobs", type=positive_int, default=2, help="submissions graded at once (default 2)")
    grd.add_argument("--memory-mb", type=positive_int, default=Limits.memory_mb,
                     help=f"memory (address space) of each student kernel (default {Limits.memory_mb})")
    grd.add_argument("--processes", type=positive_int, default=Limits.processes,
                     help=f"processes and threads allowed in each sandbox (default {Limits.processes})")
    grd.add_argument("--cpu-seconds", type=positive_int, default=Limits.cpu_seconds,
                     help=f"CPU seconds for each process in a sandbox (default {Limits.cpu_seconds})")
    grd.add_argument("--no-sandbox", action="store_true",
                     help="grade without the sandbox: student code runs as you, with the course folder reachable")
    grd.add_argument("--scoring", choices=SCORING, default=PARTIAL,
                     help=f"'{PARTIAL}' (default): each hidden check earns its share of the exercise's points "
                          f"(error-path and edge checks only beside a passing ordinary one); "
                          f"'{ALL_OR_NOTHING}': an exercise's points need every check to pass")
    grd.set_defaults(run=cmd_grade)

    exp = sub.add_parser("export-grades", help="write an assignment's scores from nbgrader's gradebook")
    exp.add_argument("assignment")
    exp.add_argument("--format", choices=FORMATS, default="csv",
                     help="csv: nbgrader's export columns; canvas: Canvas's gradebook import layout (default csv)")
    exp.add_argument("--output", help="file to write (default grading/grades/ASSIGNMENT-gradebook.csv "
                                      "or ASSIGNMENT-canvas.csv)")
    exp.add_argument("--column", help="Canvas column header, e.g. 'Orientation (1234)' to update that Canvas "
                                      "assignment (default: the assignment's name)")
    exp.set_defaults(run=cmd_export_grades)

    for name, (_, text) in DELEGATED.items():
        sub.add_parser(name, help=f"{text} (see course {name} --help)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in DELEGATED:
        return run_delegated(argv[0], argv[1:])
    from course_lib.pipeline.authoring import AuthoringError
    from course_lib.pipeline.grade import NoSubmissions
    from course_lib.pipeline.hidden import HiddenTestsMissing
    from course_lib.pipeline.nbgrader_run import NbgraderFailed
    from course_lib.pipeline.notebook_io import NotebookError
    from course_lib.pipeline.paths import CourseNotFound
    from course_lib.pipeline.release import UnknownAssignment
    from course_lib.pipeline.sandbox import SandboxUnavailable

    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (NotebookError, AuthoringError, UnknownAssignment, NoSubmissions, CourseNotFound,
            HiddenTestsMissing, SandboxUnavailable) as exc:
        print(f"course {args.command}: {exc}", file=sys.stderr)
        return 2
    except NbgraderFailed as exc:
        print(f"course {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
