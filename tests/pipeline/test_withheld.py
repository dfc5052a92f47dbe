"""Inside the grading sandbox the visible checks, the oracles and the stubbed references are
out of reach, however a student tries to load them; what setup cells need still imports."""
from __future__ import annotations

import nbformat

from course_lib.pipeline.hidden import load_hidden
from course_lib.pipeline.learner import LearnerKernel
from course_lib.pipeline.sandbox import Limits, check_available
from course_lib.pipeline.withheld import oracle_distributions, sandbox_overlays, withheld_modules
from tests.conftest import slow_fixture
from tests.pipeline.conftest import REPO

PROBE = '''
def probe(modules, references):
    import importlib, importlib.util, marshal, pathlib
    seen = {}
    for module in modules:
        try:
            importlib.import_module(module)
            seen[module] = "imported"
        except ImportError as exc:
            seen[module] = str(exc)
    for dotted in references:
        module, _, name = dotted.rpartition(".")
        try:
            getattr(importlib.import_module(module), name)()
            seen[dotted] = "ran"
        except NotImplementedError as exc:
            seen[dotted] = "stub: " + str(exc)
        except Exception as exc:  # ran the real code, with no arguments
            seen[dotted] = "real: " + type(exc).__name__
        origin = pathlib.Path(importlib.util.find_spec(module).origin)
        seen[dotted + " pyc"] = [p.name for p in (origin.parent / "__pycache__").glob(origin.stem + ".*")]
    import course_lib.model, course_lib.serving  # what setup cells import keeps working
    seen["model"] = hasattr(course_lib.model, "load_model")
    return seen
'''
NOTEBOOK = "06_serving"


@slow_fixture(scope="module")
def inside(tmp_path_factory):
    check_available()
    references = list(load_hidden(REPO / "grading" / "hidden" / f"{NOTEBOOK}.py").REFERENCES)
    overlays = sandbox_overlays(references, tmp_path_factory.mktemp("overlays"))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    modules = [*withheld_modules(), "course_lib.checks.serving", "rank_bm25"]
    with LearnerKernel(nb, course_root=REPO, limits=Limits(), overlays=overlays) as learner:
        learner.run_answer_cells()
        return references, modules, learner.call_script(PROBE, "probe", modules, references)


def test_the_oracles_are_the_test_only_distributions():
    assert {"rank-bm25", "llguidance", "transformers"} <= set(oracle_distributions())
    assert not {"torch", "tiktoken", "jsonschema", "numpy", "nbgrader"} & set(oracle_distributions())


def test_no_withheld_module_imports_and_the_error_says_why(inside):
    _, modules, seen = inside
    for module in modules:
        assert "not available while grading" in seen[module], (module, seen[module])


def test_every_reference_is_a_stub_with_no_compiled_copy_beside_it(inside):
    references, _, seen = inside
    for dotted in references:
        assert seen[dotted].startswith("stub: "), (dotted, seen[dotted])
        assert seen[dotted + " pyc"] == [], (dotted, seen[dotted + " pyc"])


def test_what_setup_cells_import_still_works(inside):
    assert inside[2]["model"] is True
