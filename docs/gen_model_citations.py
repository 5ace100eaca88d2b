"""Point the repository's citations of formulas, rules and worked examples at docs/model.md.

    python docs/gen_model_citations.py                 # rewrite every scanned folder
    python docs/gen_model_citations.py sim             # rewrite one folder (or file)
    python docs/gen_model_citations.py --check [PATH]  # exit 1 when a file would change

Convention (sim/README.md, docs/architecture.md): ``F1``-``F37`` (formulas), ``rule 3.7`` /
``rules 3.11-3.13`` (behavioural rules, ``rule 3.6.4`` = point 4 of rule 3.6), ``E1``-``E31``
(worked examples) and ``T1``-``T33`` (acceptance checks) cite docs/model.md. The code used
to write them as ``SPEC F20``, ``SPEC 3.13``, ``SPEC section 5`` after a specification that is
not in the repository; ``rewrite`` turns those into the convention (section numbers of the
old specification become the formulas or pages they held) and leaves everything else alone.

Invariant: ``rewrite(rewrite(t)) == rewrite(t)`` (running the script twice changes nothing),
and ``find_citations`` reads the same identifiers before and after a rewrite.
tests/test_model_doc.py uses ``find_citations`` and ``scanned_files`` from here, so the
scanner and the rewrite share one set of patterns.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: folders (and files) whose text is scanned for citations and rewritten
SCANNED = (
    "sim", "docs", "tests", "workloads", "notebooks", "hardware_profiles", "benchmarks",
    "kernels_validation", "README.md",
)
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".ipynb", ".sh", ".toml"}
#: files that quote the old form on purpose (the rewrite and its test)
NOT_REWRITTEN = {"docs/gen_model_citations.py", "tests/test_model_doc.py"}
#: third-party data shipped beside scenarios (licences, traces): not ours to cite from
SKIP_PARTS = {"data", "__pycache__", ".ipynb_checkpoints", "img"}

#: how many of each kind exist (docs/model.md has one heading per item)
KIND_COUNT = {"F": 37, "E": 31, "T": 33}

#: tokens that look like citations but are not, per file (path relative to the root)
NOT_CITATIONS = {
    # float64 / float32 tolerances of the kernel checks
    "tests/kernels/test_paged_attention.py": {"F32", "F64"},
    # this file names the float64 tolerance above
    "docs/gen_model_citations.py": {"F64"},
}

# --- the old specification's section numbers -> what they held ---------------------------
#: section 2.x of the old specification: the formulas it held
SECTION_FORMULAS = {
    "2.1": "F1-F3", "2.2": "F4-F5", "2.3": "F6", "2.4": "F7-F10", "2.5": "F11-F12",
    "2.6": "F13-F15", "2.7": "F16", "2.8": "F17-F20", "2.9": "F21-F24", "2.10": "F25-F28",
    "2.11": "F29-F33", "2.12": "F34-F37",
}

_ID = r"[FET]\d{1,2}(?:-[FET]\d{1,2})?"
_RULE = r"3\.\d{1,2}(?:\.\d{1,2}[a-z]?)?(?:-3\.\d{1,2})?"
_SEC2 = r"2\.(?:1[0-2]|[1-9])(?![\d.]\d)"  # the old sections 2.1-2.12 (SECTION_FORMULAS)
_SECTION = rf"{_SEC2}(?:-{_SEC2})?(?:[ \t]+F\d{{1,2}})?"
_TABLE = r"[45]\.\d"  # the old constants (4.x) and corrections (5.x) sections
_ITEM = rf"(?:{_ID}|{_RULE}|{_SECTION}|{_TABLE})"
_SEP = r"(?:,\s+|\s*/\s*|\s+and\s+)"
_OLD_LIST = re.compile(rf"( ?)\bSPEC(\s+)({_ITEM}(?:{_SEP}{_ITEM})*)(?![\d.]\d)")
_LINE_START = re.compile(r'\s*(?:"""|#:?\s*|[-*]\s+)?')
_SEP_SPLIT = re.compile(rf"({_SEP})")


def _keeping_breaks(text: str):
    """A replacement that keeps the line breaks of the whitespace it drops (so line numbers
    and indentation survive a rewrite)."""

    def repl(m: re.Match) -> str:
        return text + "".join(g[g.index("\n"):] for g in m.groups() if g and "\n" in g)

    return repl


#: whole phrases of the old text with no identifier of their own
_PHRASES = (
    (re.compile(r"\bSPEC(\s+)section(\s+)[45]\b(?!\.\d)"), _keeping_breaks("docs/model.md")),
    (re.compile(r"\bSPEC(\s+)section(\s+)4\.\d\b"), _keeping_breaks("docs/model.md")),
    (re.compile(r"\bSPEC(\s+)5\.3\b"), r"rule\g<1>3.14"),
    (re.compile(r"\bSPEC(\s+)[45]\.\d\b"), _keeping_breaks("docs/model.md")),
    (re.compile(r"\bSPEC(\s+)sim(\s+)decision"), r"kvsim's\1own\2decision"),
    (re.compile(r"\bref_count of the SPEC\b"), "ref_count of rule 3.6"),
    (re.compile(r"\bThe SPEC's arithmetic"), "Rule 3.15's arithmetic"),
    (re.compile(r"\bSPEC(\s+)worked(\s+)examples\b"), r"Worked\1examples\2(docs/model.md)"),
    (re.compile(r"\bthe SPEC examples\b"), "the worked examples"),
    (re.compile(r"\bevery SPEC example\b"), "every worked example"),
    (re.compile(r"\bSPEC examples\b"), "worked examples"),
    (re.compile(r"\bclaim \(SPEC\)"), "claim (docs/model.md)"),
)


def _rewrite_list(items: str) -> str:
    """``3.6, 3.7`` -> ``rules 3.6, 3.7``; ``2.5 F12`` -> ``F12``; ``F20`` stays ``F20``."""
    parts = _SEP_SPLIT.split(items)
    out: list[str] = []
    rules = [p for p in parts[::2] if p.startswith("3.")]
    said_rule = False
    for i, part in enumerate(parts):
        if i % 2:  # a separator
            out.append(part)
        elif part.startswith("3."):
            if not said_rule:
                plural = len(rules) > 1 or "-" in part
                part = ("rules " if plural else "rule ") + part
                said_rule = True
            out.append(part)
        elif part.startswith(("4.", "5.")):
            out.append("docs/model.md")
        elif part.startswith("2."):
            key, _, formula = part.partition(" ")
            if formula.strip():  # "2.5 F12": the formula is named, the section adds nothing
                out.append(formula.strip())
            elif "-" in key:
                lo, hi = key.split("-")
                out.append(f"{SECTION_FORMULAS[lo].split('-')[0]}-{SECTION_FORMULAS[hi].split('-')[-1]}")
            else:
                out.append(SECTION_FORMULAS[key])
        else:
            out.append(part)
    return "".join(out)


def rewrite(text: str) -> str:
    """The text with every old ``SPEC ...`` citation in the docs/model.md convention."""
    if "SPEC" not in text:  # every old form names it
        return text
    for pattern, repl in _PHRASES:
        text = pattern.sub(repl, text)
    while True:  # again until nothing changes: "SPEC SPEC 3.7" needs two passes
        new = _OLD_LIST.sub(lambda m, t=text: _rewrite_match(m, t), text)
        if new == text:
            return text
        text = new


def _rewrite_match(m: re.Match, text: str) -> str:
    """Drop ``SPEC``; a line break after it stays (without a trailing space before it)."""
    space, gap, items = m.group(1), m.group(2), _rewrite_list(m.group(3))
    before = text[text.rfind("\n", 0, m.start()) + 1 : m.start() + len(space)]
    if _LINE_START.fullmatch(before) and items[:1].islower():  # "SPEC 3.7.3: ..." opens a line
        items = items[:1].upper() + items[1:]
    if "\n" in gap:
        return gap[gap.index("\n"):] + items
    return space + items


# --- finding citations ---------------------------------------------------------------------
# a letter first, its word boundary as a look-behind: several times faster on big data files
_ID_RANGE = re.compile(r"([FET])(?<!\w[FET])(\d{1,2})(?:\s*-\s*\1(\d{1,2}))?\b")
_RULE_LIST = re.compile(
    rf"[Rr](?<!\w[Rr])ules?\s+({_RULE}(?:{_SEP}{_RULE})*)(?![\d.]\d)"
)
_RULE_ONE = re.compile(r"3\.(\d{1,2})(?:\.(\d{1,2})[a-z]?)?(?:-3\.(\d{1,2}))?")


@dataclass(frozen=True)
class Citation:
    """One cited item: ``ident`` is ``F17``, ``E24``, ``T19`` or ``3.7``; ``point`` is the
    numbered point of a rule (``3.6.4`` -> ident ``3.6``, point 4), else None."""

    ident: str
    point: int | None
    path: str
    line: int


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def find_citations(text: str, path: str = "") -> list[Citation]:
    """Every cited formula, rule, example and check in ``text`` (ranges expanded)."""
    text = rewrite(text)
    skip = NOT_CITATIONS.get(path, set())
    found: list[Citation] = []
    for m in _ID_RANGE.finditer(text):
        kind, lo, hi = m.group(1), int(m.group(2)), m.group(3)
        if f"{kind}{lo}" in skip:
            continue
        top = int(hi) if hi and int(hi) > lo else lo
        line = _line_of(text, m.start())
        found += [Citation(f"{kind}{n}", None, path, line) for n in range(lo, top + 1)]
    for m in _RULE_LIST.finditer(text):
        line = _line_of(text, m.start())
        for r in _RULE_ONE.finditer(m.group(1)):
            lo, point, hi = int(r.group(1)), r.group(2), r.group(3)
            top = int(hi) if hi and int(hi) > lo else lo
            for n in range(lo, top + 1):
                found.append(Citation(f"3.{n}", int(point) if point else None, path, line))
    return found


def _notebook_text(raw: str) -> str:
    """A notebook's cell sources only (outputs hold base64 images that look like ids)."""
    cells = json.loads(raw).get("cells", [])
    return "\n".join("".join(c.get("source", [])) for c in cells)


def _text_files(base: Path) -> Iterator[Path]:
    """``base`` itself, or the text files under it outside data folders, sorted."""
    if base.is_file():
        yield base
        return
    for p in sorted(base.rglob("*")):
        if p.is_file() and p.suffix in SUFFIXES and not SKIP_PARTS & set(p.relative_to(base).parts[:-1]):
            yield p


def scanned_files(root: Path = ROOT) -> Iterator[Path]:
    """Text files under the scanned folders, sorted."""
    for name in SCANNED:
        yield from _text_files(root / name)


def file_citations(path: Path, root: Path = ROOT) -> list[Citation]:
    raw = path.read_text(encoding="utf-8")
    text = _notebook_text(raw) if path.suffix == ".ipynb" else raw
    return find_citations(text, path.relative_to(root).as_posix())


# --- the convention, stated where the code lives -----------------------------------------
README = "sim/README.md"
CONVENTION = (
    "Citations in docstrings and comments (`F17`, `rule 3.7`, `rule 3.6.4`, `E24`, `T19`) name\n"
    "the formulas, rules, worked examples and acceptance checks of\n"
    "[docs/model.md](../docs/model.md), one heading each; `tests/test_model_doc.py` checks\n"
    "that every one resolves.\n"
)
_README_ANCHOR = "Lower layers never import upper ones. Each module's docstring states its invariant.\n"


def with_convention(text: str) -> str:
    """sim/README.md with the citation convention after its opening line (added once)."""
    if CONVENTION in text or _README_ANCHOR not in text:
        return text
    return text.replace(_README_ANCHOR, _README_ANCHOR + "\n" + CONVENTION, 1)


# --- the command ---------------------------------------------------------------------------
def _targets(args: list[str]) -> list[Path]:
    """Files to rewrite: the scanned folders, or the named files and folders. Notebooks are
    left out: notebooks/build.py writes them (run it after a rewrite)."""
    paths = list(scanned_files()) if not args else []
    for a in args:
        base = (Path.cwd() / a).resolve()
        if not base.exists():
            raise SystemExit(f"gen_model_citations: {a}: no such file or folder")
        paths += _text_files(base)
    return [p for p in paths if p.suffix != ".ipynb" and _rewritable(p)]


def _rewritable(path: Path) -> bool:
    path = path.resolve()
    return not (path.is_relative_to(ROOT) and path.relative_to(ROOT).as_posix() in NOT_REWRITTEN)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    changed = []
    for path in _targets([a for a in argv if a != "--check"]):
        old = path.read_text(encoding="utf-8")
        new = rewrite(old)
        if path.resolve() == ROOT / README:
            new = with_convention(new)
        if new != old:
            changed.append(path)
            if not check:
                path.write_text(new, encoding="utf-8")
    verb = "would rewrite" if check else "rewrote"
    for p in changed:
        print(f"{verb} {p.relative_to(ROOT) if p.is_relative_to(ROOT) else p}")
    print(f"{verb} {len(changed)} file(s)" if changed else "citations already point to docs/model.md")
    return 1 if check and changed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
