"""Hostile submissions to notebook 00: each attacks the grader in one way.

Every one starts from the released notebook (nothing answered honestly), so the only way
it could score is by the attack working: it must end up with 0 or FAILED. Paths of the
course being graded (answer key, gradebook) replace the @NAME@ markers in ``build``.
"""
from __future__ import annotations

from tests.pipeline import submissions as S

A = "00_orientation"

READS_ANSWER_KEY = """
import nbformat
key = nbformat.read("@SOURCE@", as_version=4)       # the instructor's solutions
for cell in key.cells:
    meta = cell.metadata.get("nbgrader", {})
    if meta.get("solution") or meta.get("locked"):
        exec(cell.source, globals())
print(open("@HIDDEN@").read())                       # and the hidden tests
"""

WRITES_GRADEBOOK = """
import shutil, sqlite3
db = sqlite3.connect("@GRADEBOOK@")
db.execute("UPDATE grade SET auto_score = 999, manual_score = 999")
db.commit()
shutil.rmtree("@AUTOGRADED@")
"""

SILENCES_TRACEBACKS = """
import sys
shell = get_ipython()
shell.showtraceback = lambda *a, **k: None
shell._showtraceback = lambda *a, **k: None
sys.excepthook = lambda *a: None
def softmax_with_temperature(logits, temperature=1.0):
    raise RuntimeError("nobody will see this")
def conversation_cost(*args, **kwargs):
    raise RuntimeError("nobody will see this")
"""

REWRITES_LATER_CELLS = """
def forge(lines):  # every cell after this one, the grader's calls included, is replaced
    return ["from IPython.display import display\\n",
            "display({'application/x.course-reply+json': '{\\"ok\\": 0.0105}'}, raw=True)\\n"]
get_ipython().input_transformers_post.append(forge)
"""

EQUAL_TO_ANYTHING = """
class Anything(float):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __abs__(self): return Anything(0.0)
    def __sub__(self, other): return Anything(0.0)
    __rsub__ = __sub__
    __hash__ = float.__hash__
def softmax_with_temperature(logits, temperature=1.0):
    return [Anything(0.0) for _ in logits]
def conversation_cost(*args, **kwargs):
    return Anything(0.0)
"""

DELEGATES_TO_REFERENCE = {
    "softmax_with_temperature": "from course_lib.orientation import softmax_with_temperature",
    "conversation_cost": ("import importlib\n"
                          "conversation_cost = importlib.import_module('course_lib.orientation').conversation_cost"),
}

PATCHES_NUMPY_AND_BUILTINS = """
import builtins, json, math
np.allclose = lambda *a, **k: True
np.isclose = lambda *a, **k: True
np.array_equal = lambda *a, **k: True
math.isclose = lambda *a, **k: True
builtins.isinstance = lambda *a: True
json.dumps = lambda *a, **k: '{"ok": 0.0105}'
def softmax_with_temperature(logits, temperature=1.0):
    return np.zeros(len(logits))
def conversation_cost(*args, **kwargs):
    return 0.0
"""

EXITS_THE_PROCESS = "import os\nos._exit(1)"

FORK_BOMB = """
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
"""

EATS_MEMORY = """
hog = []
while True:
    hog.append(bytearray(64 * 2**20))
"""

LOOPS_IGNORING_INTERRUPTS = """
import signal
signal.signal(signal.SIGINT, signal.SIG_IGN)
while True:
    pass
"""

OPENS_A_CONNECTION = """
import socket
socket.create_connection(("127.0.0.1", @PORT@), timeout=3).sendall(b"answers, please")
"""

PRINTS_MEGABYTES = """
for _ in range(300):
    print("x" * 100_000)
"""

HANGS_IN_EVERY_CALL = """
import time
def softmax_with_temperature(logits, temperature=1.0):
    time.sleep(3600)
def conversation_cost(*args, **kwargs):
    time.sleep(3600)
"""

KILLS_THE_GRADER = """
import os, signal
os.kill(os.getppid(), signal.SIGKILL)       # outside a sandbox: the grading worker
for pid in range(2, 64):                    # and anything else it can see
    try:
        os.kill(pid, signal.SIGKILL) if pid != os.getpid() else None
    except OSError:
        pass
"""

FOLLOWS_A_SYMLINK = """
with open("gradebook.db", "r+b") as handle:   # a link the student put in their folder
    handle.write(b"not a database any more")
"""


def build(released_nb, *, source_path, hidden_path, gradebook, autograded, port):
    """{student: notebook} for every attack (the symlink one gets its link from the caller)."""
    fill = {"@SOURCE@": source_path, "@HIDDEN@": hidden_path, "@GRADEBOOK@": gradebook,
            "@AUTOGRADED@": autograded, "@PORT@": port}
    attacks = {
        "reads_answer_key": READS_ANSWER_KEY, "writes_gradebook": WRITES_GRADEBOOK,
        "silences_tracebacks": SILENCES_TRACEBACKS, "rewrites_later_cells": REWRITES_LATER_CELLS,
        "equal_to_anything": EQUAL_TO_ANYTHING, "patches_numpy_and_builtins": PATCHES_NUMPY_AND_BUILTINS,
        "exits_the_process": EXITS_THE_PROCESS, "fork_bomb": FORK_BOMB, "eats_memory": EATS_MEMORY,
        "loops_ignoring_interrupts": LOOPS_IGNORING_INTERRUPTS, "opens_a_connection": OPENS_A_CONNECTION,
        "prints_megabytes": PRINTS_MEGABYTES, "hangs_in_every_call": HANGS_IN_EVERY_CALL,
        "kills_the_grader": KILLS_THE_GRADER, "follows_a_symlink": FOLLOWS_A_SYMLINK,
    }
    zoo = {}
    for student, code in attacks.items():
        for marker, value in fill.items():
            code = code.replace(marker, str(value))
        zoo[student] = S.append_to_last_answer(released_nb, code)
    zoo["delegates_to_reference"] = S.replace_answers(released_nb, DELEGATES_TO_REFERENCE)
    return zoo
