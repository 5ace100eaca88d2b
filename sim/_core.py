"""The optional compiled core: which modules it holds, whether it is loaded, the pure switch.

Responsibility: the one list of hot modules that ``setup.py`` compiles with Cython (pure
Python mode: the ``.py`` sources are compiled as they are, no ``.pxd`` and no Cython
syntax), and the import hook that decides, module by module, whether Python loads the
compiled extension or the ``.py`` source beside it.

Invariant: a compiled module is used only when it was built from the source that sits
beside it. The build records each module's source SHA-256 in ``_compiled.json``; an
extension whose source has changed since (an edited checkout, a merge) is passed over
for its source, with one warning naming the rebuild command, so an edit is never
silently shadowed by an old build. ``KVSIM_PURE=1`` passes over every extension.
Compiled or not, results are identical (tests/test_compiled_core.py): the compiled
modules run the same bytecode semantics (no C types: ``annotation_typing=False``).

Importing this module is cheap (os, sys, json and hashlib; nothing of ``sim``), so
``kvsim --version`` can say which core is in use without importing the engine.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

#: the hot modules (issue 25 item 5; docs/performance.md says how they were picked);
#: setup.py compiles exactly these
MODULES: tuple[str, ...] = (
    "sim.memory.base",
    "sim.memory.block_pool",
    "sim.memory.deferred",
    "sim.memory.kv_manager",
    "sim.memory.paged",
    "sim.cost.groups",
    "sim.cost.roofline",
    "sim.sched.base",
    "sim.sched.plan",
    "sim.sched.request",
    "sim.sched.vllm_v1",
    "sim.engine.node",
    "sim.metrics.recorder",
)
#: set to 1 to run the ``.py`` sources even where the compiled core is built
PURE_ENV = "KVSIM_PURE"
#: written by setup.py's build next to this file: {module: SHA-256 of the source compiled}
MANIFEST = "_compiled.json"
REBUILD_HINT = "pip install -e . (or pip install .)"

_ROOT = Path(__file__).resolve().parent  # the folder of the `sim` package


def source_path(module: str) -> Path:
    """The ``.py`` source of one of :data:`MODULES` (under this package's folder)."""
    return _ROOT.joinpath(*module.split(".")[1:]).with_suffix(".py")


def source_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pure_requested() -> bool:
    return os.environ.get(PURE_ENV, "").strip() not in ("", "0")


def _manifest() -> dict[str, str]:
    try:
        data = json.loads((_ROOT / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _extension(module: str) -> Path | None:
    stem = source_path(module).with_suffix("")
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = stem.with_name(stem.name + suffix)
        if candidate.is_file():
            return candidate
    return None


def _choices() -> dict[str, bool]:
    """Each of :data:`MODULES` that has an extension built beside its source: whether
    that extension is this source's build (an extension the manifest does not name, or
    names with another hash, is not)."""
    built = _manifest()
    return {
        m: built.get(m) == source_sha256(source_path(m))
        for m in MODULES if _extension(m) is not None
    }  # fmt: skip


class _CoreFinder:
    """Meta-path finder: a compiled module that must not be used (pure requested, or
    built from other source) is loaded from its ``.py``; every other import is left to
    the default finders (which prefer an extension to a source in the same folder)."""

    def __init__(self, fresh: dict[str, bool], pure: bool) -> None:
        self.fresh = fresh
        self.pure = pure

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.fresh:
            return None
        if not self.pure:
            if self.fresh[fullname]:
                return None  # the extension is this source's build: let it load
            warnings.warn(
                f"kvsim: {fullname} changed since the compiled core was built; running its "
                f"source (rebuild: {REBUILD_HINT})", RuntimeWarning, stacklevel=2,
            )  # fmt: skip
        return importlib.util.spec_from_file_location(fullname, source_path(fullname))


def install() -> None:
    """Put the finder first on ``sys.meta_path`` when a compiled core is present (called
    once by ``sim/__init__``); without one there is nothing to choose and nothing is
    installed."""
    fresh = _choices()
    if fresh and not any(isinstance(f, _CoreFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _CoreFinder(fresh, pure_requested()))


def loaded() -> list[str]:
    """The modules of :data:`MODULES` imported so far from a compiled extension."""
    return [
        m for m in MODULES
        if isinstance(getattr(sys.modules.get(m), "__loader__", None),
                      importlib.machinery.ExtensionFileLoader)
    ]  # fmt: skip


def built() -> bool:
    """Whether a compiled core is built beside the sources (fresh or not)."""
    return bool(_choices())


def describe() -> str:
    """One line for ``kvsim --version``: which core runs, found without importing it (a
    module edited since the build runs its source)."""
    fresh = _choices()
    if not fresh:
        return "pure Python: no compiled core built"
    if pure_requested():
        return f"pure Python: {PURE_ENV}=1, compiled core present"
    return f"compiled core: {sum(fresh.values())} of {len(MODULES)} modules"


def summary() -> str:
    """What ran, for ``summary.json``'s ``versions``: the modules imported compiled."""
    n = len(loaded())
    return f"compiled core: {n} of {len(MODULES)} modules" if n else "pure Python"
