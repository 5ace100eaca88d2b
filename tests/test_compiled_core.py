"""The optional compiled core (issue 25 item 5; ``sim/_core.py``, ``setup.py``).

Its import hook picks, module by module, the compiled extension or the ``.py`` source:
the source when ``KVSIM_PURE=1`` or when the source changed since the build (a warning
says so); the extension otherwise. Compiled and pure runs give identical results. The
tests that need a compiled build skip where none is built (an install without a C
compiler, or ``KVSIM_NO_COMPILE=1``); CI's install builds one, so they run there.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from sim import _core

ROOT = Path(__file__).resolve().parents[1]
needs_build = pytest.mark.skipif(not _core.built(), reason="no compiled core built here")


def test_every_listed_module_is_a_source_of_the_package_and_setup_compiles_that_list():
    assert len(_core.MODULES) == len(set(_core.MODULES)) >= 10
    missing = [m for m in _core.MODULES if not _core.source_path(m).is_file()]
    assert missing == []
    # setup.py builds its extensions from _core.MODULES: no second list to keep equal
    setup = (ROOT / "setup.py").read_text()
    assert 'CORE["MODULES"]' in setup and "for m in MODULES" in setup
    assert "sim/**/*.so" in (ROOT / ".gitignore").read_text()


def _finder(monkeypatch, manifest: dict[str, str], extensions: set[str], pure: bool):
    """The hook as ``install`` builds it, for a pretend build of ``extensions``."""
    monkeypatch.setattr(_core, "_manifest", lambda: manifest)
    monkeypatch.setattr(_core, "_extension", lambda m: Path("x.so") if m in extensions else None)
    return _core._CoreFinder(_core._choices(), pure)


def test_a_fresh_extension_loads_and_anything_else_is_left_to_the_default_finders(monkeypatch):
    mod = "sim.memory.paged"
    fresh = {mod: _core.source_sha256(_core.source_path(mod))}
    finder = _finder(monkeypatch, fresh, {mod}, pure=False)
    assert finder.find_spec(mod, None) is None  # the default finders load the extension
    assert finder.find_spec("sim.memory.static", None) is None  # not compiled
    assert finder.find_spec("json", None) is None


def test_pure_loads_every_compiled_module_from_its_source(monkeypatch):
    mod = "sim.engine.node"
    fresh = {mod: _core.source_sha256(_core.source_path(mod))}
    finder = _finder(monkeypatch, fresh, {mod}, pure=True)
    spec = finder.find_spec(mod, None)
    assert spec is not None and spec.origin == str(_core.source_path(mod))
    assert isinstance(spec.loader, importlib.machinery.SourceFileLoader)


@pytest.mark.parametrize("manifest", [{"sim.cost.groups": "0" * 64}, {}], ids=["edited", "unlisted"])
def test_an_extension_built_from_other_source_is_passed_over_with_a_warning(monkeypatch, manifest):
    mod = "sim.cost.groups"
    finder = _finder(monkeypatch, manifest, {mod}, pure=False)
    with pytest.warns(RuntimeWarning, match=r"sim.cost.groups changed since the compiled core"):
        spec = finder.find_spec(mod, None)
    assert spec is not None and spec.origin == str(_core.source_path(mod))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _finder(monkeypatch, manifest, {mod}, pure=True).find_spec(mod, None) is not None


def test_describe_says_which_core_runs(monkeypatch):
    fresh = {m: _core.source_sha256(_core.source_path(m)) for m in _core.MODULES[:3]}
    stale = {**fresh, _core.MODULES[0]: "0" * 64}
    monkeypatch.setattr(_core, "_extension", lambda m: Path("x.so") if m in fresh else None)
    for manifest, pure, said in [
        (fresh, "", f"compiled core: 3 of {len(_core.MODULES)} modules"),
        (stale, "", f"compiled core: 2 of {len(_core.MODULES)} modules"),
        (fresh, "1", "pure Python: KVSIM_PURE=1, compiled core present"),
        (fresh, "0", f"compiled core: 3 of {len(_core.MODULES)} modules"),
    ]:
        monkeypatch.setattr(_core, "_manifest", lambda manifest=manifest: manifest)
        monkeypatch.setenv("KVSIM_PURE", pure)
        assert _core.describe() == said
    monkeypatch.setattr(_core, "_extension", lambda m: None)
    assert _core.describe() == "pure Python: no compiled core built" and not _core.built()


def _python(code: str, pure: bool) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("KVSIM_PURE", None)
    if pure:
        env["KVSIM_PURE"] = "1"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600, check=True)  # fmt: skip
    return out.stdout.strip()


@needs_build
def test_the_compiled_modules_load_compiled_and_kvsim_pure_loads_the_sources():
    probe = ("import sim.engine.node, sim.metrics.recorder, sim.memory.paged; from sim import _core; "
             "print(sim.memory.paged.__file__.rsplit('.', 1)[-1], len(_core.loaded()))")  # fmt: skip
    assert _python(probe, pure=False) == f"so {len(_core.MODULES)}"
    assert _python(probe, pure=True) == "py 0"


def _summary(scenario: str, sets: list[str], out: Path, pure: bool) -> dict:
    argv = ["run", str(ROOT / scenario), "--out", str(out), "--quiet", "--no-report"]
    for s in sets:
        argv += ["--set", s]
    _python(f"import sys; from sim.cli import main; sys.exit(main({argv!r}))", pure)
    return json.loads((out / "summary.json").read_text())


@needs_build
@pytest.mark.parametrize(
    "scenario, sets",
    [
        ("benchmarks/chat_azure_5000.yaml", ["workload.num_requests=300"]),
        ("benchmarks/agents_500.yaml", ["workload.num_trajectories=6"]),
    ],
    ids=["chat-calibrated-paged", "agents-radix"],
)
def test_compiled_and_pure_runs_give_identical_summaries(tmp_path, scenario, sets):
    compiled = _summary(scenario, sets, tmp_path / "compiled", pure=False)
    pure = _summary(scenario, sets, tmp_path / "pure", pure=True)
    assert compiled["versions"]["kvsim_core"] == f"compiled core: {len(_core.MODULES)} of {len(_core.MODULES)} modules"
    assert pure["versions"]["kvsim_core"] == "pure Python"
    assert compiled["requests_completed"] > 0
    for key in ("wall_time_s", "versions", "command"):  # loop seconds, which core, --out
        compiled.pop(key), pure.pop(key)
    assert compiled == pure
