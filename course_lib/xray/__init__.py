"""The request X-ray: one request's record from the engine, as a JSON document (``document``),
a chat page served by ``course serve`` at ``/`` (``static/``) and a JupyterLab panel
(``panel``) that drives an engine in the kernel."""
from pathlib import Path

from course_lib.xray.document import xray_document

STATIC = Path(__file__).parent / "static"  # the chat page's files: HTML, CSS, plain JavaScript

__all__ = ["STATIC", "xray_document"]
