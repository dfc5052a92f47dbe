"""Reading and writing notebooks, with one clear error for each way a file can be broken."""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
from nbformat import NotebookNode


class NotebookError(ValueError):
    """A path that is not a readable, valid notebook. The message says what to do."""


def read_notebook(path: Path | str) -> NotebookNode:
    """Read and validate a notebook; every failure is a NotebookError with a one-line reason."""
    path = Path(path)
    if not path.exists():
        raise NotebookError(f"{path}: no such file")
    if path.is_dir():
        raise NotebookError(f"{path}: is a directory; give the path of a .ipynb file")
    if path.suffix != ".ipynb":
        raise NotebookError(f"{path}: not a notebook (expected a .ipynb file)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise NotebookError(f"{path}: not UTF-8 text, so not a notebook; restore it from a backup or re-download it") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NotebookError(
            f"{path}: corrupt notebook JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
            "restore it from JupyterLab's checkpoint (File > Revert Notebook to Checkpoint) or a backup"
        ) from None
    if not isinstance(data, dict) or "cells" not in data:
        raise NotebookError(f"{path}: JSON, but not a notebook (no 'cells' list)")
    try:
        nb = nbformat.reads(text, as_version=4)
        nbformat.validate(nb)
    except Exception as exc:  # nbformat raises several types for malformed structure
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise NotebookError(f"{path}: not a valid notebook ({first_line})") from None
    return nb


def write_notebook(nb: NotebookNode, path: Path | str) -> None:
    """Write deterministically (same notebook, same bytes), creating parent folders."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(nbformat.writes(nb) + "\n", encoding="utf-8")
