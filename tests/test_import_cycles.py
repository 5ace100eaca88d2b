"""The import graph under ``sim/`` has no cycle, and ``InvariantError`` has one home.

The graph is built by ``tests/test_layers.py``'s walker (``imports_of``: ``import x``,
``from x import y`` with relative ones resolved, run-time imports by name), over every
module of ``sim/``. Two graphs are checked: the module-level imports (what runs when a
module is imported) and every import wherever it stands (inside functions too: a cycle
there is a cycle of responsibilities, hidden by deferring the import). A package's
``__init__`` importing its own sub-modules is an edge like any other; a sub-module that
needs something of its package imports the module that defines it, not the package.
"""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

from test_layers import ROOT, imports_of, sim_modules


def _module_level(tree: ast.Module) -> list[ast.stmt]:
    """The import statements that run on import: top level, in ``if``/``try`` blocks,
    but not under ``if TYPE_CHECKING``."""
    out: list[ast.stmt] = []
    todo = list(tree.body)
    while todo:
        node = todo.pop(0)
        if isinstance(node, ast.Import | ast.ImportFrom):
            out.append(node)
        elif isinstance(node, ast.If):
            if "TYPE_CHECKING" not in ast.unparse(node.test):
                todo += node.body + node.orelse
        elif isinstance(node, ast.Try):
            todo += node.body + node.orelse + node.finalbody
            todo += [s for h in node.handlers for s in h.body]
    return out


def import_graph(module_level_only: bool) -> dict[str, set[str]]:
    """module -> the ``sim`` modules it imports (itself left out)."""
    mods = sim_modules()
    graph: dict[str, set[str]] = {}
    for module, path in mods.items():
        source = path.read_text()
        if module_level_only:
            source = "\n".join(ast.unparse(n) for n in _module_level(ast.parse(source)))
        found = imports_of(source, module, path.name == "__init__.py")
        graph[module] = {t for _, t in found if t in mods and t != module}
    return graph


def cycle_of(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of ``graph`` (its nodes in order, the first repeated last), or []."""
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        return list(exc.args[1])
    return []


def test_the_module_level_import_graph_is_acyclic():
    assert cycle_of(import_graph(module_level_only=True)) == []


def test_the_whole_import_graph_is_acyclic_imports_inside_functions_included():
    assert cycle_of(import_graph(module_level_only=False)) == []


def test_the_cycle_finder_finds_a_cycle_and_the_walker_sees_deferred_imports():
    """The check can fail: a two-module cycle is found, and an import inside a function
    is an edge of the whole graph but not of the module-level one."""
    assert cycle_of({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) in (
        ["a", "c", "b", "a"], ["a", "b", "c", "a"], ["b", "a", "c", "b"],
        ["c", "b", "a", "c"], ["b", "c", "a", "b"], ["c", "a", "b", "c"],
    )  # fmt: skip
    assert cycle_of({"a": {"b"}, "b": set()}) == []
    source = "import sim.units\n\ndef later():\n    from sim.run import runner\n"
    top = _module_level(ast.parse(source))
    assert [t for _, t in imports_of(ast.unparse(top[0]), "sim.x", False)] == ["sim.units"]
    assert [t for _, t in imports_of(source, "sim.x", False)] == ["sim.units", "sim.run.runner"]


def _invariant_error_imports(path: Path) -> list[str]:
    """Where ``path`` imports the name ``InvariantError`` from (``from M import ...``)."""
    return [
        node.module or "."
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom)
        and any(a.name == "InvariantError" for a in node.names)
    ]


def test_invariant_error_is_defined_once_and_imported_from_sim_errors_alone():
    files = [*sim_modules().values(), *sorted((ROOT / "tests").rglob("*.py"))]
    elsewhere = [
        f"{p.relative_to(ROOT)}: from {m}"
        for p in files
        for m in _invariant_error_imports(p)
        if m != "sim.errors"
    ]
    assert elsewhere == []
    defined = [
        str(p.relative_to(ROOT))
        for p in sim_modules().values()
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.ClassDef) and node.name == "InvariantError"
    ]
    assert defined == ["sim/errors.py"]
