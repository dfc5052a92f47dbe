"""Interview drills: generated numeric problems (``problems``), graded with a stated tolerance.

>>> make_problem("context_budget", 3).kind
'context_budget'
"""
from course_lib.drills.problem_model import Generator, Problem
from course_lib.drills.problems import KINDS, TOPICS, kinds_for, make_problem

__all__ = ["KINDS", "TOPICS", "Generator", "Problem", "kinds_for", "make_problem"]
