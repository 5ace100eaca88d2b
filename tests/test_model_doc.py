"""docs/model.md: every citation in the repository resolves to one of its headings, and its
worked examples reproduce their numbers through the functions they name.

The citation patterns and the rewrite of the old ``SPEC ...`` form live in
docs/gen_model_citations.py (one copy); the expected values are the hand-computed ones
written in docs/model.md's ``Check:`` lines, never values obtained by running the code.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import math
import operator
import re
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "docs" / "model.md"


def _load_tool():
    spec = importlib.util.spec_from_file_location("gen_model_citations", ROOT / "docs" / "gen_model_citations.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


TOOL = _load_tool()
TEXT = MODEL.read_text(encoding="utf-8")
ITEM_HEADING = re.compile(r"^### (F\d+|E\d+|T\d+|3\.\d+) \S", re.M)


def _sections() -> dict[str, str]:
    """Heading id -> the text under it, up to the next heading."""
    marks = list(re.finditer(r"^#{2,3} .*$", TEXT, re.M))
    out = {}
    for i, m in enumerate(marks):
        h = ITEM_HEADING.match(m.group(0))
        if h:
            end = marks[i + 1].start() if i + 1 < len(marks) else len(TEXT)
            assert h.group(1) not in out, f"two headings for {h.group(1)}"
            out[h.group(1)] = TEXT[m.end() : end]
    return out


SECTIONS = _sections()


def _anchor(ident: str) -> str:
    return ident.lower() if ident[0] in "FET" else "r" + ident.replace(".", "-")


# --- the page itself ---------------------------------------------------------------------
def test_one_heading_per_item_with_a_stable_anchor():
    expected = {f"{k}{n}" for k, count in TOOL.KIND_COUNT.items() for n in range(1, count + 1)}
    expected |= {f"3.{n}" for n in range(17)}
    assert set(SECTIONS) == expected
    for ident in expected:
        anchor = f'<a id="{_anchor(ident)}"></a>\n### {ident} '
        assert anchor in TEXT, f"docs/model.md: {ident} needs the anchor line right above it"


def _points(ident: str) -> set[int]:
    """Numbered top-level points of a rule (``1.``, ``2.`` at the start of a line)."""
    return {int(n) for n in re.findall(r"^(\d+)\. ", SECTIONS[ident], re.M)}


def test_rules_number_their_points_from_one():
    for ident in (i for i in SECTIONS if i.startswith("3.")):
        points = _points(ident)
        assert points == set(range(1, len(points) + 1)) and points, ident


# --- citations ---------------------------------------------------------------------------
def _all_citations():
    return [c for p in TOOL.scanned_files(ROOT) for c in TOOL.file_citations(p, ROOT)]


CITATIONS = _all_citations()


def test_the_scan_finds_the_known_citations():
    """A guard against a scanner that finds nothing: these are cited today."""
    found = {(c.path, c.ident) for c in CITATIONS}
    assert ("sim/sizing/kv.py", "F1") in found
    assert ("sim/prefix/eviction.py", "3.7") in found
    assert ("sim/cluster/score.py", "E17") in found
    assert ("tests/cluster/test_score.py", "T19") in found
    assert len(CITATIONS) > 250


def test_every_citation_resolves_to_a_heading():
    missing = sorted({f"{c.path}:{c.line}: {c.ident}" for c in CITATIONS if c.ident not in SECTIONS})
    assert not missing, "cited but not in docs/model.md:\n" + "\n".join(missing)


def test_every_cited_rule_point_exists():
    bad = sorted(
        f"{c.path}:{c.line}: rule {c.ident}.{c.point}"
        for c in CITATIONS
        if c.point is not None and c.point not in _points(c.ident)
    )
    assert not bad, "rule points not in docs/model.md:\n" + "\n".join(bad)


# --- the scanner and the rewrite, on exact strings -------------------------------------
def _ids(text: str, path: str = "") -> list[tuple[str, int | None]]:
    return [(c.ident, c.point) for c in TOOL.find_citations(text, path)]


def test_scanner_expands_ranges_and_reads_rule_points():
    assert _ids("F34-F37 and E4-E5") == [("F34", None), ("F35", None), ("F36", None),
                                          ("F37", None), ("E4", None), ("E5", None)]
    assert _ids("rules 3.11-3.13, 3.6.4b") == [("3.11", None), ("3.12", None), ("3.13", None),
                                                ("3.6", 4)]
    assert _ids("Rule 3.7.3: evict") == [("3.7", 3)]
    assert _ids("T2-F12") == [("T2", None), ("F12", None)]


def test_scanner_ignores_look_alikes():
    assert _ids("validate-e2e, FP8, T_wait, 1E5, F2F, Python 3.11, 3.5 GB/s") == []
    kernel_tolerances = "F" + "64, F32 = 1e-12, 1e-5"  # split: this file is scanned too
    assert _ids(kernel_tolerances, "tests/kernels/test_paged_attention.py") == []


def test_rewrite_of_the_old_form():
    rw = TOOL.rewrite
    assert rw("(SPEC 3.15, F19-F20)") == "(rule 3.15, F19-F20)"
    assert rw("(SPEC 2.11, 3.11-3.14)") == "(F29-F33, rules 3.11-3.14)"
    assert rw("(SPEC 2.5 F12, 3.2)") == "(F12, rule 3.2)"
    assert rw("(SPEC 2.3-2.7, 3.1-3.5)") == "(F6-F16, rules 3.1-3.5)"
    assert rw('    """SPEC 3.7.3: when') == '    """Rule 3.7.3: when'
    assert rw("holes, as SPEC\nE9's hole") == "holes, as\nE9's hole"
    assert rw("mistake; SPEC section 5).") == "mistake; docs/model.md)."
    assert rw("name (SPEC 5.3)") == "name (rule 3.14)"
    # code that merely names something SPEC is left alone
    assert rw("spec = replace(SPEC)\nEXAMPLE_SPEC = 1") == "spec = replace(SPEC)\nEXAMPLE_SPEC = 1"


def test_the_convention_goes_into_sim_readme_once():
    readme = (ROOT / TOOL.README).read_text(encoding="utf-8")
    once = TOOL.with_convention(readme)
    assert TOOL.CONVENTION in once and TOOL.with_convention(once) == once
    assert once.count(TOOL.CONVENTION) == 1


_TOKENS = st.sampled_from(
    ["SPEC", " ", "\n", "\n    ", ", ", " / ", " and ", "F12", "E24", "T2", "-", "3.7", "3.6.4b",
     "3.11-3.13", "2.5", "2.3-2.7", "2.11", "4.1", "5.3", "section", "5", "(", ")", '"""', "#: ",
     "sim", "decision", "rule", "examples", "worked"]
)


def _raw_ids(text: str) -> set[str]:
    """F/E/T tokens as written, without the rewrite that ``find_citations`` applies first."""
    return {kind + n for kind, n, _ in TOOL._ID_RANGE.findall(text)}


@given(st.lists(_TOKENS, max_size=30).map("".join))
def test_rewrite_is_idempotent_and_drops_no_identifier(text):
    once = TOOL.rewrite(text)
    assert TOOL.rewrite(once) == once
    assert not _raw_ids(text) - _raw_ids(once)  # it only adds (section -> formulas)
    assert once.count("\n") == text.count("\n")  # line numbers of citations survive


def test_repository_rewrite_is_idempotent_and_leaves_no_old_citation():
    old = re.compile(r"\bSPEC\s+(?:[FET]\d|\d\.\d|section\b)")
    for path in TOOL.scanned_files(ROOT):
        if path.relative_to(ROOT).as_posix() in TOOL.NOT_REWRITTEN:
            continue
        once = TOOL.rewrite(path.read_text(encoding="utf-8"))
        assert TOOL.rewrite(once) == once, path
        assert not old.search(once), f"{path}: an old SPEC citation the rewrite does not cover"


def test_every_function_the_page_names_exists():
    names = set(re.findall(r"`(sim(?:\.\w+)+)`", TEXT))
    assert len(names) > 60
    missing = []
    for dotted in sorted(names):
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):  # the longest importable module, then attributes
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ModuleNotFoundError:
                continue
            for attr in parts[cut:]:
                obj = getattr(obj, attr, None)
            break
        if obj is None:
            missing.append(dotted)
    assert not missing, f"docs/model.md names what does not exist: {missing}"


# --- worked examples reproduce their numbers -------------------------------------------
CHECK = re.compile(r"^Check: `(?P<call>[^`]+)` → (?P<value>\S+(?: \S+)*?) \((?P<tol>exact|rel [0-9.e-]+)\)$", re.M)
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.Pow: operator.pow}


def _resolve(node: ast.expr):
    """``sim.a.b.f`` -> the object; only names under ``sim``."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    assert isinstance(node, ast.Name) and node.id == "sim", ast.unparse(node)
    parts.append("sim")
    dotted = ".".join(reversed(parts))
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _value(node: ast.expr):
    """Literals, arithmetic on them, and calls of ``sim.`` functions; nothing else."""
    if isinstance(node, ast.Constant | ast.List | ast.Tuple) or (
        isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
    ):
        try:
            return ast.literal_eval(node)
        except ValueError:
            pass
    if isinstance(node, ast.List):
        return [_value(e) for e in node.elts]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](_value(node.left), _value(node.right))
    if isinstance(node, ast.Call):
        fn = _resolve(node.func)
        return fn(*[_value(a) for a in node.args], **{k.arg: _value(k.value) for k in node.keywords})
    raise AssertionError(f"docs/model.md Check: unsupported expression {ast.unparse(node)}")


CHECKS = [(m.group("call"), m.group("value"), m.group("tol")) for m in CHECK.finditer(TEXT)]


def test_the_page_has_checks_for_the_examples():
    assert len(CHECKS) >= 50
    lines = [ln for ln in TEXT.splitlines() if ln.startswith("Check:")]
    assert len(lines) == len(CHECKS), "a Check: line the test cannot parse"


@pytest.mark.parametrize(("call", "value", "tol"), CHECKS, ids=[c[0][:70] for c in CHECKS])
def test_worked_example_reproduces_its_number(call, value, tol):
    got = _value(ast.parse(call, mode="eval").body)
    want = ast.literal_eval(value)
    if tol == "exact":
        assert got == want
    else:
        assert math.isclose(got, want, rel_tol=float(tol.split()[1]), abs_tol=0.0)


def test_every_example_is_checked_tested_or_says_why_not():
    """An example's number is reproduced here (Check:), by a unit test (Tested by:), by the
    example it restates, or the page says no function computes it."""
    checked = {i for i, body in SECTIONS.items() if re.search(r"^(Check|Tested by): ", body, re.M)}
    for ident, body in SECTIONS.items():
        if ident[0] not in "ET" or ident in checked:
            continue
        via = {c.ident for c in TOOL.find_citations(body)} & checked
        assert via or "No kvsim function" in body or "not a test" in body, ident


def test_tested_by_links_exist_and_cite_the_item():
    for ident, body in SECTIONS.items():
        for line in re.findall(r"^Tested by: (.+)$", body, re.M):
            named = {c.ident for c in TOOL.find_citations(body)} | {ident}
            for rel in (p.strip() for p in line.split(",")):
                path = ROOT / rel
                assert path.is_file(), f"{ident}: {rel} does not exist"
                cited = {c.ident for c in TOOL.find_citations(path.read_text(encoding="utf-8"))}
                assert cited & named, f"{ident}: {rel} cites none of {sorted(named)}"
