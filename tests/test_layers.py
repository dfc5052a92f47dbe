"""The package's layers: every import points down the table in course_lib/__init__.py."""
import course_lib
from tests import import_graph as graph

MODULES = graph.modules()
EDGES = graph.import_edges(MODULES)
LAYERS = graph.declared_layers(course_lib.__doc__)
RANK = {name: len(LAYERS) - i for i, names in enumerate(LAYERS) for name in names}  # bottom layer = 1


def test_no_two_files_import_each_other_even_inside_functions():
    assert graph.cycles(MODULES, EDGES) == []


def test_no_two_packages_import_each_other():
    units = {graph.unit(m) for m in MODULES}
    assert graph.cycles(units, graph.unit_edges(EDGES)) == []


def test_every_package_and_top_level_module_has_exactly_one_layer():
    units = {graph.unit(m) for m in MODULES} - {"course_lib"}
    named = [name for names in LAYERS for name in names]
    assert sorted(named) == sorted(set(named)), "a name stands in two layers of the table"
    assert set(named) == units, (f"missing from the table: {sorted(units - set(named))}; "
                                 f"in the table but not in course_lib: {sorted(set(named) - units)}")


def test_every_import_points_to_a_lower_layer():
    upward = sorted(f"{source} imports {target} ({graph.unit(source)} is not above {graph.unit(target)})"
                    for source, targets in EDGES.items() for target in targets
                    if graph.unit(source) != graph.unit(target) and graph.unit(target) != "course_lib"
                    and RANK[graph.unit(source)] <= RANK[graph.unit(target)])
    assert upward == []


def test_the_graph_reader_sees_imports_inside_functions_and_relative_ones(tmp_path):
    package = tmp_path / "course_lib"
    (package / "low").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "low" / "__init__.py").write_text("from . import leaf\n")
    (package / "low" / "leaf.py").write_text("def f():\n    from course_lib.high import g\n")
    (package / "high.py").write_text("from course_lib.low.leaf import f\n")
    known = graph.modules(package)
    edges = graph.import_edges(known)
    assert edges["course_lib.low.leaf"] == {"course_lib.high"}
    assert edges["course_lib.low"] == {"course_lib.low.leaf"}
    assert graph.cycles(known, edges) == [["course_lib.high", "course_lib.low.leaf"]]
    assert graph.cycles({graph.unit(m) for m in known}, graph.unit_edges(edges)) == [["high", "low"]]
