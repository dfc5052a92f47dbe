"""The kernel side of a hidden test's call: run one learner function, publish plain data.

The grader sends a cell like

    from course_lib.pipeline.remote_call import answer
    answer(globals(), '{"name": "softmax", "args": [[1.0, 2.0], 0.5], "kwargs": {"dict": []}}')

and reads back one display output of type ``MIME`` whose text is JSON: ``{"ok": value}``,
``{"raised": ["ValueError", "Exception", ...], "message": "..."}`` or ``{"refused": why}``.
Everything here runs in the learner's process, so the grader trusts none of it: it only
decodes the reply as plain data (see plain_data.py) and compares it itself.
"""
from __future__ import annotations

import json

from course_lib.pipeline.plain_data import NotPlainData, decode, encode

MIME = "application/x.course-reply+json"
MAX_MESSAGE = 500


def answer(namespace: dict, request: str) -> None:
    from IPython.display import display

    display({MIME: json.dumps(_reply(namespace, json.loads(request)))}, raw=True)


def _reply(namespace: dict, request: dict) -> dict:
    name = request["name"]
    scope = namespace
    if request.get("script"):  # hidden-test glue that sees the learner's names as globals
        scope = dict(namespace)
        exec(compile(request["script"], "<hidden-test script>", "exec"), scope)
    if name not in scope:
        return {"refused": f"`{name}` is not defined (did its answer cell run without errors?)"}
    if not callable(scope[name]):
        return {"refused": f"`{name}` is a {type(scope[name]).__name__}, not a function"}
    args = decode(request["args"], tensors=True)
    kwargs = decode(request["kwargs"], tensors=True)
    try:
        result = scope[name](*args, **kwargs)
    except BaseException as exc:  # the learner's exception is the answer; report it
        names = [cls.__name__ for cls in type(exc).__mro__]
        return {"raised": names, "message": str(exc)[:MAX_MESSAGE]}
    try:
        return {"ok": encode(result)}
    except NotPlainData as exc:
        return {"refused": f"`{name}` returned something that is not plain data: {exc}"}
