"""sim/README.md's layer table, enforced on the import graph (DESIGN.md: "lower layers never
import upper ones", run-time imports included).

Every module under ``sim/`` is parsed with ``ast``. Its imports are ``import x``,
``from x import y`` (relative ones resolved), wherever they stand (module level, inside a
function, under ``TYPE_CHECKING``), and the targets of ``importlib.import_module(...)`` and
``__import__(...)``: a string literal, or the constant prefix of an f-string
(``f"sim.cli.{name}"`` imports something in ``sim.cli``). A dynamic import whose target the
source does not show is itself a failure: the graph could not check it.

The table's rows are the layers, lowest first; the ``sim/...`` names in one row's first cell
are peers (they may import each other). A module belongs to the longest name that prefixes
it; ``sim/__init__`` is the package root alone. A module may import its own row and the
rows above it, never a row below it.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIM = ROOT / "sim"
README = SIM / "README.md"


# --------------------------------------------------------------------------- the table
def layer_rows(text: str) -> list[list[str]]:
    """Module names of each table row, in order (``sim/memory`` -> ``sim.memory``)."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        names = re.findall(r"`(sim(?:/\w+)*)`", line.split("|")[1])
        if names:
            rows.append([_dotted(n) for n in names])
    return rows


def _dotted(name: str) -> str:
    dotted = name.replace("/", ".")
    return dotted.removesuffix(".__init__")


def rank_of(rows: list[list[str]]) -> dict[str, int]:
    return {name: i for i, row in enumerate(rows) for name in row}


def layer_of(module: str, ranks: dict[str, int]) -> str | None:
    """The table name a module belongs to (longest prefix; the root only by itself)."""
    best = None
    for name in ranks:
        inside = module == name or (name != "sim" and module.startswith(name + "."))
        if inside and (best is None or len(name) > len(best)):
            best = name
    return best


# --------------------------------------------------------------------------- the graph
def module_name(path: Path) -> str:
    parts = path.relative_to(SIM.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    path = SIM.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _dynamic_target(call: ast.Call) -> tuple[bool, str | None]:
    """(is a dynamic import, its module or None when the source does not show it)."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in ("import_module", "__import__"):
        return False, None
    arg = call.args[0] if call.args else None
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return True, arg.value
    if isinstance(arg, ast.JoinedStr) and arg.values:
        head = arg.values[0]
        if isinstance(head, ast.Constant) and isinstance(head.value, str):
            prefix = head.value.rsplit(".", 1)[0] if "." in head.value else ""
            return True, prefix or None
    return True, None


def imports_of(source: str, module: str, is_package: bool) -> list[tuple[int, str | None]]:
    """(line, imported module) for every import in ``source``; None = an unknown target."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[tuple[int, str | None]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.append((node.lineno, sub if is_module(sub) else base))
        elif isinstance(node, ast.Call):
            dynamic, target = _dynamic_target(node)
            if dynamic:
                found.append((node.lineno, target))
    return found


def sim_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(SIM.rglob("*.py"))}


def violations() -> list[str]:
    ranks = rank_of(layer_rows(README.read_text()))
    out = []
    for module, path in sim_modules().items():
        own = layer_of(module, ranks)
        rel = path.relative_to(ROOT)
        for line, target in imports_of(path.read_text(), module, path.name == "__init__.py"):
            if target is None:
                out.append(f"{rel}:{line}: a dynamic import whose module the source does not show")
                continue
            if target != "sim" and not target.startswith("sim."):
                continue  # third-party or standard library
            theirs = layer_of(target, ranks)
            if own is None or theirs is None:
                continue  # reported by test_every_module_has_a_layer
            if ranks[theirs] > ranks[own]:
                out.append(f"{rel}:{line}: {own} imports {target} ({theirs}, a higher layer)")
    return out


# --------------------------------------------------------------------------- tests
def test_no_module_imports_a_higher_layer():
    assert violations() == []


def test_every_module_has_a_layer_and_every_layer_exists():
    rows = layer_rows(README.read_text())
    ranks = rank_of(rows)
    assert len(rows) >= 10 and len(ranks) == sum(map(len, rows)), "a name is in two rows"
    homeless = [m for m in sim_modules() if layer_of(m, ranks) is None]
    assert homeless == []
    assert [n for n in ranks if not is_module(n)] == []


def test_the_table_puts_memory_below_prefix_and_the_entry_points_on_top():
    ranks = rank_of(layer_rows(README.read_text()))
    assert ranks["sim.errors"] == ranks["sim.units"] == 0
    assert ranks["sim.memory"] < ranks["sim.prefix"] < ranks["sim.sched"] < ranks["sim.engine"]
    assert ranks["sim.run"] < ranks["sim.regress"] < ranks["sim.cli"] == ranks["sim"]


def test_the_collector_sees_every_kind_of_import():
    """Imports inside functions, relative ones, and run-time imports by name are edges."""
    source = textwrap.dedent(
        """
        import importlib
        from importlib import import_module
        import sim.units
        from sim.memory import base, make_allocator
        from . import errors
        from .. import yamlio

        def later(name):
            from sim.engine.node import Node
            importlib.import_module("sim.prefix.kinds")
            __import__("sim.sched")
            import_module(f"sim.cli.{name}")
            importlib.import_module(name)
        """
    )
    got = [t for _, t in imports_of(source, "sim.memory.registry", is_package=False)]
    assert got == [
        "importlib",
        "importlib",
        "sim.units",
        "sim.memory.base",
        "sim.memory",
        "sim.memory.errors",
        "sim.yamlio",
        "sim.engine.node",
        "sim.prefix.kinds",
        "sim.sched",
        "sim.cli",
        None,
    ]


def test_a_memory_module_that_imports_prefix_by_name_is_caught(tmp_path):
    """The shape of the old registry (``"sim.prefix...:Class"`` imported at run time) and a
    plain upward import both break the table."""
    ranks = rank_of(layer_rows(README.read_text()))
    source = 'import importlib\nmodule = importlib.import_module(path.partition(":")[0])\n'
    assert imports_of(source, "sim.memory.registry", False)[-1] == (2, None)
    upward = imports_of("from sim.prefix.kinds import RadixAllocator\n", "sim.memory.x", False)
    assert ranks[layer_of(upward[0][1], ranks)] > ranks[layer_of("sim.memory.x", ranks)]


def test_no_module_class_strings_in_sim():
    """Kinds and strategies are found through imports, never ``"module:Class"`` strings."""
    pattern = re.compile(r"^sim(\.\w+)+:\w+$")
    hits = [
        f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}"
        for path in sim_modules().values()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and pattern.match(node.value)
    ]
    assert hits == []
