"""The attack's trial timeout cuts off a slow candidate without leaving the process broken."""
from __future__ import annotations

import logging
import string
import sys
import threading
import time

import pytest

from tests.hidden.attack import MAX_DEFERRAL, TrialTimeout, holds_logging_lock, in_stdlib, run_with_deadline


def spin():
    while True:
        pass


def test_a_trial_that_never_returns_is_cut_off_at_its_deadline():
    with pytest.raises(TrialTimeout):
        run_with_deadline(spin, 0.05)


def test_a_trial_that_returns_in_time_gives_its_value_and_leaves_no_alarm_behind():
    assert run_with_deadline(lambda: 42, 0.05) == 42
    time.sleep(0.1)  # an alarm left armed would raise TrialTimeout here


def test_a_trial_blocked_inside_the_standard_library_is_still_cut_off():
    start = time.perf_counter()
    with pytest.raises(TrialTimeout):
        run_with_deadline(threading.Event().wait, 0.05)  # blocks in threading.py for good
    assert time.perf_counter() - start >= MAX_DEFERRAL  # deferred first, then cut off all the same


def test_frames_are_told_apart_by_whose_code_they_run():
    frames = []

    class Recorder(dict):
        def __getitem__(self, key):
            frames.append(sys._getframe(1))  # string.py's own code, which asked for the key
            return "x"

    string.Template("$a").substitute(Recorder())
    assert frames[0].f_code.co_filename == string.__file__ and in_stdlib(frames[0])
    assert not in_stdlib(sys._getframe())  # this test's frame
    caller = sys._getframe(1)  # pytest's, a site package's code
    assert "site-packages" in caller.f_code.co_filename and not in_stdlib(caller)


def test_timeouts_never_leave_the_logging_lock_held():
    """A candidate that logs in a loop, cut off again and again: afterwards another thread can
    still log (a timeout between the lock's acquire and its try would block it forever)."""
    def logs_forever():
        while True:
            logging.getLogger("course.attack.trial")

    for _ in range(40):
        with pytest.raises(TrialTimeout):
            run_with_deadline(logs_forever, 0.01)
    other = threading.Thread(target=logging.getLogger, args=("course.attack.other",), daemon=True)
    other.start()
    other.join(timeout=5)
    assert not other.is_alive(), "the logging lock was left held by a timed-out trial"


def test_the_logging_lock_is_seen_held_only_while_this_thread_holds_it():
    assert not holds_logging_lock()
    with logging._lock:  # the lock logging.getLogger takes one line before its try
        assert holds_logging_lock()
        seen_elsewhere = []
        other = threading.Thread(target=lambda: seen_elsewhere.append(holds_logging_lock()))
        other.start()
        other.join(timeout=5)
        assert seen_elsewhere == [False]
    assert not holds_logging_lock()
